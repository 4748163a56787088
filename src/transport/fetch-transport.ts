import { cappedStream, ResponseTooLargeError, type Transport } from "./transport.ts";

/**
 * The global `fetch` (or any Transport) with the answer size cap: an announced length over the
 * cap fails the call before the body is read, and a body that grows past it fails its reads.
 * The counting costs a stream hop per chunk, which is why the API calls' hot path uses our own
 * client (it counts in its parser); what goes through here is the rest (image downloads, proxies).
 *
 * Redirects are not followed unless the caller asks (`redirect`): the answer is the 3xx itself,
 * as our own client hands it over (a 502 for an API call, a failed key probe; image downloads
 * follow theirs within their origin). `fetch`'s own following carried the request to any origin
 * the upstream named: the prompt (307, 308) and every key header but `Authorization` (Anthropic's
 * `x-api-key`), and that origin's answer was billed as the vendor's (a raw-TCP probe).
 */
export function createFetchTransport(maxResponseBytes: number, fetchImpl: Transport = (url, init) => fetch(url, init)): Transport {
  return async (url, init) => {
    const res = await fetchImpl(url, init.redirect === undefined ? { ...init, redirect: "manual" } : init);
    if (!res.body) return res;
    if (Number(res.headers.get("content-length") ?? 0) > maxResponseBytes) {
      res.body.cancel().catch(() => {});
      throw new ResponseTooLargeError(maxResponseBytes);
    }
    return new Response(cappedStream(res.body, maxResponseBytes), { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}
