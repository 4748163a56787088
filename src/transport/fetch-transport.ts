import { ResponseFramingError } from "./http1/response-parser.ts";
import { MAX_SAME_ORIGIN_REDIRECTS, sameOriginRedirect } from "./same-origin-redirect.ts";
import { answerCap, attemptHooksOfInit, cappedStream, ResponseTooLargeError, type Transport } from "./transport.ts";

/**
 * The global `fetch` (or any Transport) with the answer size cap: an announced length over the
 * cap fails the call before the body is read, and a body that grows past it fails its reads.
 * The counting costs a stream hop per chunk, which is why the API calls' hot path uses our own
 * client (it counts in its parser); what goes through here is the rest (image downloads, proxies).
 *
 * Redirects are followed only within the request's origin (same-origin-redirect.ts), as our own
 * client does, unless the caller says otherwise (`redirect`: image downloads follow theirs
 * themselves); any other is handed over as the 3xx it is.
 */
export function createFetchTransport(maxResponseBytes: number, fetchImpl: Transport = (url, init) => fetch(url, init)): Transport {
  return async (url, init) => {
    let res: Response;
    if (init.redirect !== undefined) res = await fetchImpl(url, init).catch(rejectFramed);
    else {
      const manual: RequestInit = { ...init, redirect: "manual" };
      const method = (init.method ?? "GET").toUpperCase();
      res = await fetchImpl(url, manual).catch(rejectFramed);
      for (let hops = 0; hops < MAX_SAME_ORIGIN_REDIRECTS; hops++) {
        const next = sameOriginRedirect(url, res, method, init.body);
        if (next === null) break;
        res.body?.cancel().catch(() => {});
        url = next;
        res = await fetchImpl(url, manual).catch(rejectFramed);
      }
    }
    // Both lengths (RFC 9112 §6.3: a sign of smuggling or a broken intermediary): fetch reads the
    // chunks and may reuse the connection; our own client refuses such an answer (response-parser.ts).
    if (res.headers.has("transfer-encoding") && res.headers.has("content-length")) {
      res.body?.cancel().catch(() => {});
      throw new ResponseFramingError("both content-length and transfer-encoding");
    }
    if (!res.body) return res;
    const cap = answerCap(attemptHooksOfInit(init), maxResponseBytes);
    if (Number(res.headers.get("content-length") ?? 0) > cap) {
      res.body.cancel().catch(() => {});
      throw new ResponseTooLargeError(cap, res.status);
    }
    return new Response(cappedStream(res.body, cap, decodeFailure), { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

/** The codes of Bun's fetch failing to decode a body that is not the content-encoding it names. */
const DECODE_FAILURES: ReadonlySet<unknown> = new Set(["ZlibError", "BrotliDecompressionError", "ZstdDecompressionError"]);

/**
 * fetch's decoding failure (a TypeError with one of those codes) is malformed data, as on our own
 * client (http1/decode-body.ts); passed on as it came, a stream was told the connection was lost.
 */
function decodeFailure(err: unknown): unknown {
  const code = (err as { code?: unknown } | null)?.code;
  if (DECODE_FAILURES.has(code)) return new ResponseFramingError("the body is not the content-encoding it names");
  return FRAMING_FAILURES.has(code) ? new ResponseFramingError(`fetch could not read the answer (${code})`) : err;
}

/**
 * The codes of Bun's fetch refusing an answer it reached but could not read as HTTP/1.1 (a folded
 * or malformed header line, a bad or doubled Content-Length, a transfer coding it does not know,
 * broken chunk framing). Passed on as they came (TypeErrors), such an answer was "could not be
 * reached", counted as a connect failure, where our own client says "unreadable answer",
 * bad_answer (a raw-TCP probe through a configured proxy).
 */
const FRAMING_FAILURES: ReadonlySet<unknown> = new Set(["Malformed_HTTP_Response", "InvalidContentLength", "UnsupportedTransferEncoding", "InvalidHTTPResponse"]);

/** A failed call, as a framing error when fetch's code says it was one (see FRAMING_FAILURES). */
function rejectFramed(err: unknown): never {
  throw FRAMING_FAILURES.has((err as { code?: unknown } | null)?.code) ? new ResponseFramingError(`fetch could not read the answer (${(err as { code: string }).code})`) : err;
}
