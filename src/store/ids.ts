/** Random URL-safe identifiers; the prefix tells a reader what kind of thing an id names. */
export function randomId(prefix: string, bytes = 12): string {
  return `${prefix}_${Buffer.from(crypto.getRandomValues(new Uint8Array(bytes))).toString("base64url")}`;
}
