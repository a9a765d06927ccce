// Offline stand-in for jsr:@std/bytes's equals (see assert.ts for why).

/** True when `a` and `b` hold the same bytes. */
export function equals(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) return false;
  }
  return true;
}
