import { Elysia } from "elysia";
import type { Tracker } from "../ops/request-trace.ts";
import { pathOf } from "./admission.ts";

/**
 * Every request gets an id as it arrives: the client's `x-request-id` when it is 1–128 of
 * `[A-Za-z0-9._:-]`, else a new UUID. It is set on the request (the pipeline reads it from
 * there: upstream header, usage record, log lines) and in the response headers Elysia merges
 * into every answer — refusals from admission and errors from the errors plugin included.
 *
 * Used before admission, so its hook runs first. `finishing`: an after-response hook closes the
 * traces nothing else closed (other routes' answers); the pipeline, the errors plugin and
 * admission close theirs themselves, and a stream closes its own when it ends.
 */
export function requestIdPlugin(tracker: Tracker, finishing: boolean) {
  const plugin = new Elysia({ name: "switchyard/request-id" }).onRequest(({ request, set }) => {
    set.headers["x-request-id"] = tracker.begin(request, pathOf(request.url)).id;
  });
  if (!finishing) return plugin;
  return plugin.onAfterResponse({ as: "global" }, ({ request, response, set }) => {
    const trace = tracker.of(request);
    if (!trace || trace.finished || trace.streaming) return;
    tracker.responded(request, response instanceof Response ? response.status : typeof set.status === "number" ? set.status : 200);
  });
}
