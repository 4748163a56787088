import { Elysia } from "elysia";
import type { Catalogue } from "../../catalogue/catalogue.ts";
import { handleChat } from "../../gateway/handle-chat.ts";
import type { ForwardDeps } from "../../gateway/forward.ts";
import { openaiResponses } from "../../formats/format.ts";
import { GatewayError } from "../../streaming/gateway-error.ts";
import type { Principals } from "../plugins/admission.ts";
import { ResponsesRequest } from "../../formats/openai-responses/schema.ts";
import { responsesToChat, ResponsesRequestError, type ResponsesPlan } from "../../formats/openai-responses/responses-to-chat.ts";
import type { ResponseStore } from "../../formats/openai-responses/response-store.ts";
import { resolveStoredInput, type StoredInput } from "../../formats/openai-responses/stored-input.ts";

/**
 * `POST /v1/responses`: the OpenAI Responses API as a third client format. The request is
 * translated to a chat request and takes the one pipeline (limits, credits, fallbacks,
 * upstream translation); only the answer is written in the Responses API's shape. What the
 * request refers to by id (`item_reference`, `previous_response_id`) is looked up in the
 * account's stored answers first; the answer is stored unless the request says `store: false`.
 */
export function responsesRoute(deps: ForwardDeps & { catalogue: Catalogue; responseStore: ResponseStore; principals: Principals }) {
  const store = deps.responseStore;
  /** Hosted tools are dropped on every turn of an agent like Codex: the log says so once per kind, then at debug level. */
  const reported = new Set<string>();
  return new Elysia({ name: "switchyard/responses" })
    .post(
      "/v1/responses",
      ({ body, request, server, set }) => {
        const input = body.input;
        if (input === "" || (Array.isArray(input) && input.length === 0)) throw new GatewayError(422, "invalid_request", "input must contain at least one item.");
        const principal = deps.principals.of(request);
        let plan: ResponsesPlan;
        let stored: StoredInput;
        try {
          stored = resolveStoredInput(body, principal.accountId, store);
          const whole = stored.history.length > 0 ? [...stored.history, ...stored.input] : stored.input;
          plan = responsesToChat({ ...body, input: whole });
        } catch (err) {
          if (err instanceof ResponsesRequestError) throw new GatewayError(400, "invalid_request", err.message);
          throw err;
        }
        if (plan.dropped.length > 0) {
          const fresh = plan.dropped.filter((d) => !reported.has(d));
          for (const d of fresh) reported.add(d);
          deps.log(fresh.length > 0 ? "info" : "debug", "responses request: dropped what chat upstreams cannot run (hosted tools, their items)", { dropped: [...new Set(plan.dropped)] });
        }
        // `store` is OpenAI's default; Codex and careful clients say false, and then nothing is kept.
        const keep = store.enabled && body.store !== false;
        const previous = stored.previous;
        // Keeping is a convenience for later requests: failing to keep must not fail this answer
        // (a later reference to it is then a 400 like any unknown id). Never log the items.
        const onFinal = (response: { id: string; output: Record<string, unknown>[] }) => {
          try {
            store.keep(principal.accountId, response.id, { ...(previous ? { previous } : {}), input: stored.input, output: response.output });
          } catch (err) {
            deps.log("warn", "responses: could not keep an answer for later references", { responseId: response.id, error: err instanceof Error ? err.name : "unknown" });
          }
        };
        return handleChat(deps, {
          format: openaiResponses({
            tools: plan.tools,
            echo: { ...plan.echo, store: keep },
            onFinal: keep ? onFinal : undefined,
          }),
          body: plan.chat,
          request,
          principal,
          server,
          set,
        });
      },
      { body: ResponsesRequest },
    )
    .get("/v1/responses/:id", () => {
      throw new GatewayError(
        404,
        "not_found",
        "Responses cannot be retrieved from this gateway: it keeps answers only for later requests to refer to (item_reference, previous_response_id). Read the answer when it is returned.",
      );
    });
}
