import type { Tracker } from "../../ops/request-trace.ts";

/**
 * Every request gets an id as it arrives: the client's `x-request-id` when it is 1–128 of
 * `[A-Za-z0-9._:-]`, else a new UUID (also sent as `request-id` to Anthropic-format clients). It is set on the request (the pipeline reads it from
 * there: upstream header, usage record, log lines) and in the response headers Elysia merges
 * into every answer — refusals from admission and errors from the errors plugin included.
 *
 * Not a hook of its own: admission's one `onRequest` hook calls it first, because every
 * `onRequest` hook is a dispatch on every request (about 2 µs each, measured).
 */
export function assignRequestId(tracker: Tracker) {
  return (request: Request, set: { headers: Record<string, unknown> }, path: string): void => {
    const id = tracker.begin(request, path).id;
    set.headers["x-request-id"] = id;
    // Anthropic names it `request-id`, and its SDK reads only that (`message._request_id`,
    // `APIError.requestID`): Anthropic-format routes, and any request its SDK sends, carry both.
    if (path.startsWith("/v1/messages") || request.headers.has("anthropic-version")) set.headers["request-id"] = id;
  };
}

/**
 * Closes the traces nothing else closed: answers of the routes registered after it (models,
 * health, metrics, OpenAPI, admin). The pipeline, the errors plugin and admission close theirs
 * themselves, and a stream closes its own when it ends, so the chat routes are registered
 * before this hook and do not pay for it: Elysia runs after-response hooks in a `setImmediate`
 * with an async closure per request.
 */
export function closeTracesHook(tracker: Tracker) {
  return ({ request, response, set }: { request: Request; response: unknown; set: { status?: number | string } }) => {
    const trace = tracker.of(request);
    if (!trace || trace.finished || trace.streaming) return;
    tracker.responded(request, response instanceof Response ? response.status : typeof set.status === "number" ? set.status : 200);
  };
}
