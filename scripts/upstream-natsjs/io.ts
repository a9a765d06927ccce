// Offline stand-in for jsr:@std/io's writeAll (see assert.ts for why).

/** Something with Deno's `Writer` shape. */
export interface Writer {
  write(p: Uint8Array): Promise<number>;
}

/** Writes all of `data` to `writer`, looping over partial writes. */
export async function writeAll(writer: Writer, data: Uint8Array): Promise<void> {
  let written = 0;
  while (written < data.length) {
    written += await writer.write(data.subarray(written));
  }
}
