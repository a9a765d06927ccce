// Offline stand-in for jsr:@std/fmt/colors (see assert.ts for why): no colours, text unchanged.
const plain = (s: string): string => s;
export const blue = plain;
export const cyan = plain;
export const gray = plain;
export const green = plain;
export const magenta = plain;
export const red = plain;
export const white = plain;
export const yellow = plain;
export const bold = plain;
