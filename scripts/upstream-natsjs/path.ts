// Offline stand-in for jsr:@std/path (see assert.ts for why): node:path has the same join/resolve.
export { join, resolve } from "node:path";
