/**
 * Byte helpers shared by the protocol layers.
 *
 * @module
 */

/**
 * Join byte arrays into one (one write instead of several).
 *
 * @param parts The arrays, in order.
 * @returns A new array with all of them; the only part itself when there is one.
 */
export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0] as Uint8Array;
  let size = 0;
  for (const p of parts) size += p.length;
  const out = new Uint8Array(size);
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
}
