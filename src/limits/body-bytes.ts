/**
 * The size of a request's body as the gateway read it, where its Content-Length does not say it:
 * a compressed body (http/plugins/request-coding.ts) declares its compressed size, and the bounds
 * made from a body's bytes (a prompt's tokens at most one a byte: the hold, the context check)
 * must be made from what it decoded to, or a 1 KB zstd body of 2 million tokens was held, and
 * charged at most, as 1,000.
 */
const decoded = new WeakMap<Request, number>();

/** Notes that `request`'s body decoded to `bytes`. */
export function noteDecodedBody(request: Request, bytes: number): void {
  decoded.set(request, bytes);
}

/** What `request`'s body decoded to, when it was sent compressed; else undefined (its Content-Length, or its JSON, says it). */
export function decodedBodyBytes(request: Request): number | undefined {
  return decoded.get(request);
}
