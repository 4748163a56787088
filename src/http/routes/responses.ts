import { Elysia, t } from "elysia";
import type { Catalogue } from "../../catalogue/catalogue.ts";
import { handleChat } from "../../gateway/handle-chat.ts";
import type { ForwardDeps } from "../../gateway/forward.ts";
import { openaiResponses } from "../../formats/format.ts";
import { clientClosed, GatewayError } from "../../streaming/gateway-error.ts";
import type { Principals } from "../plugins/admission.ts";
import { InputTokensRequest, ResponsesRequest } from "../../formats/openai-responses/schema.ts";
import { countResponseTokens } from "../../gateway/count-tokens.ts";
import type { CountQueue } from "../../limits/count-queue.ts";
import { responsesToChat, ResponsesRequestError, type ResponsesPlan } from "../../formats/openai-responses/responses-to-chat.ts";
import { ResponseStoreUnavailableError, type ResponseStore } from "../../formats/openai-responses/response-store.ts";
import { expandsStored, resolveStoredInput, type StoredInput } from "../../formats/openai-responses/stored-input.ts";
import { holdTurn, holdsTurn, type ParseTurns } from "../../limits/parse-turns.ts";
import { LARGE_BODY_BYTES } from "../plugins/json-body.ts";
import { createBodyBudget } from "../../limits/body-budget.ts";
import { storedAnswerBody } from "./stored-answer-body.ts";

/**
 * `POST /v1/responses`: the OpenAI Responses API as a third client format. The request is
 * translated to a chat request and takes the one pipeline (limits, credits, fallbacks,
 * upstream translation); only the answer is written in the Responses API's shape. What the
 * request refers to by id (`item_reference`, `previous_response_id`) is looked up in the
 * account's stored answers first; the answer is stored unless the request says `store: false`.
 */
/** Kinds of dropped items the log says once each at info level; past them, debug. */
const REPORTED_KINDS = 256;

export function responsesRoute(deps: ForwardDeps & {
  catalogue: Catalogue;
  responseStore: ResponseStore;
  principals: Principals;
  counts: CountQueue;
  /** The large bodies' turns (limits/parse-turns.ts): a request that brings in stored answers takes one too. */
  turns?: ParseTurns;
}) {
  const store = deps.responseStore;
  // Stored answers being sent (GET, free): per account, at most its whole quota of stored answers
  // at once, twice over (one slow reader's answer beside another's); an answer larger than that
  // share alone always fits.
  const sending = createBodyBudget({ perHolderBytes: 2 * deps.settings.responses.account_max_bytes, totalBytes: Number.POSITIVE_INFINITY });
  /** Hosted tools are dropped on every turn of an agent like Codex: the log says so once per kind, then at debug level. */
  const reported = new Set<string>();
  /** The request with what it refers to by id looked up in the account's stored answers, as a chat request. */
  const translated = async (body: ResponsesRequest, accountId: string, maxStoredBytes = deps.settings.limits.max_body_bytes): Promise<{ plan: ResponsesPlan; stored: StoredInput }> => {
    try {
      // References and the previous answers' chain may bring in what the client could have sent
      // itself (a body's worth), weighed before they are parsed; a free count, what it may count.
      const stored = await resolveStoredInput(body, accountId, store, maxStoredBytes, maxStoredBytes).catch(unavailable);
      const whole = stored.history.length > 0 ? [...stored.history, ...stored.input] : stored.input;
      return { plan: responsesToChat({ ...body, input: whole }), stored };
    } catch (err) {
      if (err instanceof ResponsesRequestError) throw new GatewayError(400, "invalid_request", err.message);
      throw err;
    }
  };
  /**
   * `translated`, in a parse turn when the request brings in stored answers: a small body naming
   * them has the gateway read, parse and translate up to a body's worth (9 MB a request: a
   * tenant's ten keys held the thread at 96–98 % CPU and another tenant's p99 went from 57 to
   * 343 ms, a hostile-tenant probe, twenty-eighth session), so it waits its turn as a body of that
   * size does. What it made decides how long the turn lasts: past LARGE_BODY_BYTES, up to its
   * vendor request, as a large body's (building that request from 9 MB is most of the work: ended
   * with the expansion, the same probe still had the thread at 98 %); within it, with the
   * expansion, so the chains agents and SDKs make every turn (item references, a short
   * `previous_response_id`) do not hold it across stores, counts and the reservation (a review).
   */
  const expandedInTurn = async (request: Request, body: ResponsesRequest, principal: { keyId: string; accountId: string }, maxStoredBytes: number, measure = true) => {
    let endTurn = deps.turns && !holdsTurn(request) && expandsStored(body) ? await deps.turns.take(principal.keyId, principal.accountId) : undefined;
    try {
      // A client that left while it waited: its turn goes to the next at once, its work undone.
      if (endTurn && request.signal.aborted) throw clientClosed();
      const { plan, stored } = await translated(body, principal.accountId, maxStoredBytes);
      const chatBytes = measure ? Buffer.byteLength(JSON.stringify(plan.chat)) : 0;
      if (endTurn && chatBytes + plan.carriedBytes > LARGE_BODY_BYTES) {
        holdTurn(request, endTurn);
        endTurn = undefined;
      }
      return { plan, stored, chatBytes };
    } finally {
      endTurn?.();
    }
  };
  return new Elysia({ name: "switchyard/responses" })
    .post(
      "/v1/responses",
      async ({ body, request, server, set }) => {
        const input = body.input;
        if (input === "" || (Array.isArray(input) && input.length === 0)) throw new GatewayError(422, "invalid_request", "input must contain at least one item.");
        const principal = deps.principals.of(request);
        const { plan, stored, chatBytes } = await expandedInTurn(request, body, principal, deps.settings.limits.max_body_bytes);
        // Nothing left to send (no input, or only items no chat upstream can take): the 422 of an
        // empty conversation, in the Responses API's own words rather than chat's `messages`.
        if (plan.chat.messages.length === 0) {
          const unsent = [...new Set(plan.dropped.filter((d) => d.startsWith("item:")).map((d) => d.slice(5)))];
          throw new GatewayError(422, "invalid_request",
            `input must contain at least one message${unsent.length > 0 ? ` (items of type ${unsent.map((t) => JSON.stringify(t.slice(0, 100))).join(", ")} are not forwarded to chat upstreams)` : ""}.`);
        }
        // `store` is OpenAI's default; Codex and careful clients say false, and then nothing is kept.
        const keep = store.enabled && body.store !== false;
        // An input that alone is past the per-answer limit could never be kept: refused before
        // anything is sent or charged, rather than answered and silently not kept.
        if (keep) {
          const inputBytes = Buffer.byteLength(JSON.stringify(stored.input));
          if (inputBytes > store.maxAnswerBytes) throw new GatewayError(400, "invalid_request", tooLargeMessage(inputBytes, store.maxAnswerBytes));
        }
        if (plan.dropped.length > 0) {
          // Item types are the client's own strings: at most REPORTED_KINDS are remembered (a set
          // that kept every one grew by 300 MB over ten requests of made-up types, an audit), and
          // the log line names a few, shortened.
          const dropped = [...new Set(plan.dropped.map((d) => d.slice(0, 100)))];
          const fresh = dropped.filter((d) => !reported.has(d));
          for (const d of fresh) if (reported.size < REPORTED_KINDS) reported.add(d);
          deps.log(fresh.length > 0 && reported.size < REPORTED_KINDS ? "info" : "debug", "responses request: dropped what chat upstreams cannot run (hosted tools, their items)", {
            dropped: dropped.slice(0, 20),
          });
        }
        const previous = stored.previous;
        // Keeping is a convenience for later requests: failing to keep must not fail this answer
        // (its final response then says `store: false`, and a later reference to it is a 400 like
        // any unknown id). Never log the items.
        const onFinal = (response: { id: string; output: Record<string, unknown>[] }, sealed?: ReadonlyMap<string, string>): Promise<boolean> =>
          store.keep(principal.accountId, response.id, { ...(previous ? { previous } : {}), input: stored.input, response: withSealed(response, sealed) }).then(
            (kept) => {
              if (!kept) deps.log("info", "responses: an answer was not kept: larger than the per-answer limit or the account's quota", { responseId: response.id });
              return kept;
            },
            (err) => {
              deps.log("warn", "responses: could not keep an answer for later references", { responseId: response.id, error: err instanceof Error ? err.name : "unknown" });
              return false;
            },
          );
        return handleChat(deps, {
          format: openaiResponses({
            tools: plan.tools,
            echo: { ...plan.echo, store: keep },
            onFinal: keep ? onFinal : undefined,
            sealThinking: plan.sealThinking,
            // A kept answer keeps its signed thinking for `previous_response_id` whatever `include`
            // asked (as OpenAI keeps a stored answer's reasoning): sealed into the kept copy only.
            keepThinking: keep,
          }),
          body: plan.chat,
          // What is sent bounds the prompt, not the request: stored items make it larger, and so
          // does the translation (a custom tool gains a description and a schema: 4 KB of 128 such
          // tools became 43 KB; a reviewer's finding), so the hold and the prompt billed cover it.
          bodyBytes: chatBytes + plan.carriedBytes,
          unseenBytes: plan.carriedBytes,
          request,
          principal,
          server,
          set,
          // The chain's first answer names the conversation; a first turn that is kept starts one (its own id).
          chain: stored.root ?? (keep ? (uuid: string) => `resp_${uuid}` : undefined),
        });
      },
      { body: ResponsesRequest },
    )
    // The SDK's `responses.inputTokens.count`: the request counted as `POST /v1/responses` would
    // send it (stored items and the previous answer's chain included), never charged.
    .post(
      "/v1/responses/input_tokens",
      async ({ body, request }) => {
        const principal = deps.principals.of(request);
        const { plan } = await expandedInTurn(request, { ...body, input: body.input ?? [] }, principal, deps.settings.limits.count_tokens_max_bytes, false);
        const response = await countResponseTokens(deps, plan.chat as Record<string, unknown>, request.headers, request.signal, principal, principal.models);
        // Registered before the app's after-response hook (the chat routes close their own traces).
        deps.tracker?.responded(request, response.status);
        return response;
      },
      { body: InputTokensRequest },
    )
    // The SDKs' `responses.retrieve` and `responses.delete`, for the key's own account only:
    // another account's id is the same 404 as an unknown one, so existence does not leak.
    .get(
      "/v1/responses/:id",
      async ({ params, request }) => {
        // OpenAI streams a background response's events again; the gateway runs none in the
        // background, so every stored answer is whole: asked as a stream, the SDK would read JSON
        // as events and find none. A 400 says so; without `stream` the answer comes whole.
        if (request.url.includes("stream=") && new URL(request.url).searchParams.get("stream") === "true") {
          throw new GatewayError(400, "invalid_request", "stream=true replays a background response's events; this gateway runs no background responses, so every stored answer is whole: retrieve it without stream.", undefined, { param: "stream" });
        }
        const accountId = deps.principals.of(request).accountId;
        const json = await store.body(accountId, params.id).catch(unavailable);
        if (json === undefined) throw notFound(params.id);
        const body = storedAnswerBody(json, { budget: sending, holder: accountId, idleMs: deps.settings.server.client_idle_ms });
        if (body === "busy") {
          throw new GatewayError(429, "rate_limit", "Too many stored responses on their way to this account's clients at once. Read the ones asked for, then retry.", { "retry-after": "1" }, { code: "rate_limit_exceeded" });
        }
        return new Response(body.stream, { headers: { "content-type": "application/json", "content-length": String(body.bytes) } });
      },
      { params: ResponseIdParams },
    )
    // The SDKs' `responses.inputItems.list`: the input items a stored answer was made from (its
    // own request's, references resolved), as OpenAI lists them: newest first unless asked, in
    // pages of `limit` after an item id.
    .get(
      "/v1/responses/:id/input_items",
      async ({ params, query, request }) => {
        const found = await store.response(deps.principals.of(request).accountId, params.id).catch(unavailable);
        if (!found) throw notFound(params.id);
        return inputItemsPage(params.id, found.input, query);
      },
      { params: ResponseIdParams, query: InputItemsQuery },
    )
    .delete(
      "/v1/responses/:id",
      async ({ params, request }) => {
        const deleted = await store.delete(deps.principals.of(request).accountId, params.id).catch(unavailable);
        if (!deleted) throw notFound(params.id);
        return { id: params.id, object: "response.deleted", deleted: true } satisfies ResponseDeleted;
      },
      { params: ResponseIdParams },
    );
}

/** The answer as it is kept: its reasoning items with the signed thinking sealed for the kept copy (encode-responses.ts, keepThinking). */
function withSealed<R extends { output: Record<string, unknown>[] }>(response: R, sealed: ReadonlyMap<string, string> | undefined): R {
  if (!sealed || sealed.size === 0) return response;
  return { ...response, output: response.output.map((item) => (typeof item.id === "string" && sealed.has(item.id) ? { ...item, encrypted_content: sealed.get(item.id) } : item)) };
}

export const ResponseIdParams = t.Object({ id: t.String({ minLength: 1, maxLength: 200 }) });

export const InputItemsQuery = t.Object({
  limit: t.Optional(t.Numeric({ minimum: 1, maximum: 100, multipleOf: 1 })),
  order: t.Optional(t.Union([t.Literal("asc"), t.Literal("desc")], { error: "must be asc or desc" })),
  after: t.Optional(t.String({ maxLength: 200 })),
  include: t.Optional(t.Union([t.String(), t.Array(t.String())])),
}, { additionalProperties: true });

/** Item id prefixes as OpenAI names them, for input items sent without an id. */
const ITEM_PREFIX: Record<string, string> = { message: "msg", function_call: "fc", function_call_output: "fco", custom_tool_call: "ctc", custom_tool_call_output: "ctco", reasoning: "rs" };

/**
 * A page of a stored answer's input items as OpenAI writes them: each with an id (its own, else
 * one made from the answer's id and its place), messages with their content as parts.
 */
export function inputItemsPage(responseId: string, input: readonly Record<string, unknown>[], query: { limit?: number; order?: "asc" | "desc"; after?: string }) {
  const base = responseId.startsWith("resp_") ? responseId.slice("resp_".length) : responseId;
  const items = input.map((raw, i) => {
    const type = typeof raw.type === "string" ? raw.type : raw.role !== undefined ? "message" : "item";
    const item: Record<string, unknown> = { ...raw, type, id: typeof raw.id === "string" ? raw.id : `${ITEM_PREFIX[type] ?? "item"}_${base}_in${i}` };
    if (type === "message") {
      const assistant = raw.role === "assistant";
      if (typeof raw.content === "string") item.content = [assistant ? { type: "output_text", text: raw.content, annotations: [] } : { type: "input_text", text: raw.content }];
      item.status ??= "completed";
    }
    return item;
  });
  const ordered = query.order === "asc" ? items : items.slice().reverse();
  const from = query.after === undefined ? 0 : ordered.findIndex((item) => item.id === query.after) + 1;
  const limit = query.limit ?? 20;
  // An `after` that names no item of the answer is an empty last page, not one with more after it.
  const unknownAfter = from === 0 && query.after !== undefined;
  const data = unknownAfter ? [] : ordered.slice(from, from + limit);
  return { object: "list" as const, data, first_id: (data[0]?.id as string | undefined) ?? null, last_id: (data.at(-1)?.id as string | undefined) ?? null, has_more: !unknownAfter && from + data.length < ordered.length };
}

export const ResponseDeleted = t.Object({ id: t.String(), object: t.Literal("response.deleted"), deleted: t.Literal(true) });
export type ResponseDeleted = typeof ResponseDeleted.static;

/** As OpenAI words it; the id is bounded by the route's schema. */
function notFound(id: string): GatewayError {
  return new GatewayError(404, "not_found", `No response found with id '${id}'. Stored answers expire an hour after their last use, may be evicted under the account's quota, and belong to the account that stored them.`);
}

/** The store cannot answer (Redis unreachable): a 503 that says what to do, never the store's own error text. */
function unavailable(err: unknown): never {
  if (err instanceof ResponseStoreUnavailableError) {
    throw new GatewayError(
      503,
      "overloaded",
      "Stored responses cannot be reached right now, so previous_response_id, item_reference and reading or deleting a stored response are unavailable. Retry in a few seconds, or send the whole conversation in `input` with `store: false`.",
      { "retry-after": "5" },
    );
  }
  throw err;
}

function tooLargeMessage(bytes: number, limit: number): string {
  return `This request's input is ${bytes} bytes, more than the ${limit} bytes an answer may take to be stored (input and output together). Send it with \`store: false\` (the answer is then not kept, and later requests send the conversation whole), or send less.`;
}
