import { cappedStream, ResponseTooLargeError, type Transport } from "./transport.ts";

/**
 * The global `fetch` (or any Transport) with the answer size cap: an announced length over the
 * cap fails the call before the body is read, and a body that grows past it fails its reads.
 * The counting costs a stream hop per chunk, which is why the API calls' hot path uses our own
 * client (it counts in its parser); what goes through here is the rest (image downloads, proxies).
 */
export function createFetchTransport(maxResponseBytes: number, fetchImpl: Transport = (url, init) => fetch(url, init)): Transport {
  return async (url, init) => {
    const res = await fetchImpl(url, init);
    if (!res.body) return res;
    if (Number(res.headers.get("content-length") ?? 0) > maxResponseBytes) {
      res.body.cancel().catch(() => {});
      throw new ResponseTooLargeError(maxResponseBytes);
    }
    return new Response(cappedStream(res.body, maxResponseBytes), { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}
