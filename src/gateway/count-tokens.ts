import type { Catalogue } from "../catalogue/catalogue.ts";
import type { CountQueue } from "../limits/count-queue.ts";
import { countInTurn } from "./count-in-turn.ts";
import { anthropicAdapter } from "../providers/anthropic/anthropic-adapter.ts";
import { checkAnthropicContent, checkOpenAIContent, refuseThread } from "./check-content.ts";
import { leaveOutToolResultMedia } from "../formats/common/content-text.ts";
import { accountRefusal } from "./attempt.ts";
import { Deadline } from "./deadline.ts";
import type { ForwardDeps } from "./forward.ts";
import { clientClosed, GatewayError, NO_RETRY } from "../streaming/gateway-error.ts";
import { promptText } from "../formats/prepare-upstream.ts";
import { upstreamStatusError } from "../providers/upstream-errors.ts";
import { withKey } from "../providers/key-pools.ts";
import { keyVerdict } from "../providers/key-pool.ts";
import { modelAllowed, modelRefusal } from "../accounts/model-access.ts";
import { attemptInit } from "../transport/transport.ts";
import type { ModelConfig } from "../config/schema.ts";
import { openaiRequestToAnthropic } from "../formats/openai-chat/openai-to-anthropic.ts";
import type { ChatRequest } from "../formats/openai-chat/schema.ts";
import { upstreamTraits } from "../formats/common/model-traits.ts";
import { withAnthropicToolIds } from "../formats/common/tool-call-ids.ts";
import { reportedCount } from "../streaming/events.ts";
import { promptTokenCeiling, vendorPromptAllowance } from "../billing/token-estimate.ts";

/** Whether a vendor's count is one the request could make: its text's bytes, or failing that its whole body's, plus what a vendor adds. */
function countFits(count: number, body: Record<string, unknown>, textBytes: number): boolean {
  const messages = Array.isArray(body.messages) ? body.messages.length : 0;
  const added = vendorPromptAllowance(body);
  if (count <= promptTokenCeiling(textBytes, messages) + added) return true;
  // Tools and schemas are counted too: the body's bytes bound them (read only for a count past the text's).
  return count <= promptTokenCeiling(Buffer.byteLength(JSON.stringify(body)), messages) + added;
}

/** Longest wait for an upstream's count before the gateway answers with its own estimate. */
const UPSTREAM_COUNT_MS = 10_000;

/**
 * The most a count's answer (or its error body) may be, after decoding: Anthropic's is
 * `{"input_tokens": N}` and its errors a few hundred bytes. Past it the transport stops reading
 * and the estimate answers. Without it only the transport's cap (64 MiB) bounded a free request:
 * forty counts answered with a gzip bomb were decoded to that cap each, stalling the gateway for
 * 2.6 s and taking 300 MB (a raw-TCP probe, thirty-sixth session).
 */
export const COUNT_ANSWER_BYTES = 64 * 1024;

/**
 * `POST /v1/messages/count_tokens` (Claude Code calls it dozens of times for `/context` and to
 * decide when to compact). An Anthropic upstream counts with its own tokenizer; every other
 * upstream, or an Anthropic one that cannot answer, gets the gateway's estimate (the tokenizer
 * used for usage, plus the per-message framing `forward` reserves for). Nothing is reserved or
 * charged, and no usage record is written: a count produces no answer. Because it is free, its
 * size is capped (`limits.count_tokens_max_bytes` of prompt text, else 413 as Anthropic answers a
 * request over its size limit) and our tokenizer's counts take turns per account and key (limits/count-queue.ts).
 */
export async function countMessageTokens(
  deps: Pick<ForwardDeps, "settings" | "fetch" | "log" | "keyPools" | "scrubber"> & { catalogue: Catalogue; counts: CountQueue },
  body: Record<string, unknown>,
  headers: Headers,
  signal: AbortSignal,
  /** Whose turn a count of our tokenizer takes: the key's, within its account's (limits/count-queue.ts). */
  turn: { keyId: string; accountId: string },
  /** The key's model list (null: every model): a count for a model it may not use is refused like a request. */
  allowed: readonly string[] | null = null,
): Promise<Response> {
  // The same refusal as POST /v1/messages for the same body (a count of nothing is no conversation).
  if (Array.isArray(body.messages) && body.messages.length === 0) throw new GatewayError(422, "invalid_request", "messages must contain at least one message.");
  const model = countedModel(deps.catalogue, String(body.model), allowed);
  refuseThread(body);
  // Counted as it would be sent: images and files inside tool results are left out with a note (handle-chat.ts).
  if (Array.isArray(body.messages)) leaveOutToolResultMedia(body.messages, "anthropic");
  checkAnthropicContent(body);
  const text = promptText("anthropic", body);
  const bytes = countableBytes(deps.settings.limits.count_tokens_max_bytes, text);

  const configured = deps.settings.providers.get(model.provider)!;
  if (configured.kind === "anthropic" && model.upstream_api !== "images") {
    const upstreamBody: Record<string, unknown> = { ...body, model: model.upstream_model };
    delete upstreamBody.models;
    // Another vendor's tool ids in the history, rewritten as the answer's request has them (prepare-upstream.ts).
    if (Array.isArray(body.messages)) upstreamBody.messages = withAnthropicToolIds(body.messages as Record<string, unknown>[]);
    // A count has no prompt cache to keep warm: any usable key of the pool, and what the vendor
    // answers tells the pool about that key as an answer would.
    const pool = deps.keyPools?.get(configured.id);
    const chosen = pool?.choose(undefined);
    const key = chosen instanceof Promise ? await chosen : chosen;
    const provider = key ? withKey(configured, key.secret) : configured;
    const call = anthropicAdapter.buildRequest(provider, upstreamBody, headers);
    const clientRequestId = headers.get("x-request-id") ?? undefined;
    if (clientRequestId) call.headers["x-request-id"] = clientRequestId;
    // One Deadline, as an answer's attempt has: the count, head to body, within the shorter of
    // UPSTREAM_COUNT_MS and the provider's first-byte limit; the client leaving ends it too.
    const limitMs = Math.min(UPSTREAM_COUNT_MS, provider.timeouts.first_byte_ms);
    const deadline = new Deadline({ firstByteMs: limitMs, idleMs: limitMs, totalMs: limitMs });
    deadline.maxAnswerBytes = COUNT_ANSWER_BYTES;
    const onClientAbort = () => deadline.abort(new DOMException("client disconnected", "AbortError"));
    if (signal.aborted) onClientAbort();
    else signal.addEventListener("abort", onClientAbort);
    try {
      const res = await deps.fetch(`${call.url}/count_tokens`, attemptInit(deadline, { method: "POST", headers: call.headers, body: call.body }));
      // A refused key is refused for answers too; a rate-limited count is not: Anthropic limits token
      // counting apart from messages, so a count's 429 must not cool the key its answers still get.
      const json = (await res.json().catch(() => undefined)) as { input_tokens?: unknown } | undefined;
      // A refusal about the key's vendor account (disabled, out of credit: Anthropic says both as
      // 400s) is the key's as on an answer, never the client's to read (attempt.ts, accountRefusal).
      const account = res.ok ? undefined : accountRefusal(res.status, anthropicAdapter.errorMessage(json) ?? "", (json as { error?: { code?: unknown } } | undefined)?.error?.code as string | undefined);
      const status = account === "dead" ? 401 : account === "no_credit" ? 402 : account === "cannot_afford" ? 0 : res.status;
      if (key && (keyVerdict(status) !== "cool" || account === "no_credit")) pool!.report(key, status, undefined);
      // A count that is no whole number in range, or more than the request's own bytes could make
      // (as plan.ts bounds a billed prompt, billedPromptMax), is not passed on (-5, 1e308, 12.7 reached Claude Code, which
      // compacts by it; a raw-TCP probe): the gateway's estimate answers instead.
      const reported = res.ok ? reportedCount(json?.input_tokens) : undefined;
      if (reported !== undefined && countFits(reported, body, bytes)) return Response.json({ input_tokens: reported });
      if (res.ok) deps.log("warn", "upstream token count refused; answering with an estimate", { provider: provider.id, clientRequestId });
      // A request the vendor finds malformed is the client's to fix; anything else (no such
      // endpoint on a compatible server, an outage, our key) still deserves a count.
      if ((res.status === 400 || res.status === 422) && account === undefined) throw upstreamStatusError(res.status, anthropicAdapter.errorMessage(json), deps.scrubber);
      deps.log("warn", "upstream token count failed; answering with an estimate", { provider: provider.id, status: res.status, clientRequestId });
    } catch (err) {
      if (err instanceof GatewayError) throw err;
      if (signal.aborted) throw clientClosed();
      deps.log("warn", "upstream token count failed; answering with an estimate", { provider: provider.id, error: String(err), clientRequestId });
    } finally {
      deadline.clear();
      signal.removeEventListener("abort", onClientAbort);
    }
  }
  const messages = (body.messages as unknown[]).length;
  const tokens = await countInTurn(deps.counts, turn.keyId, text, signal, undefined, turn.accountId);
  return Response.json({ input_tokens: tokens + 4 * messages + 3 });
}

/** Fields of a translated request that Anthropic's count_tokens takes (it refuses the answer's parameters, `max_tokens` among them). */
const ANTHROPIC_COUNT_FIELDS = ["model", "system", "messages", "tools", "tool_choice"] as const;

/**
 * `POST /v1/responses/input_tokens` (the OpenAI SDK's `responses.inputTokens.count`), given the
 * request already translated to chat as `POST /v1/responses` translates it (stored items and
 * `previous_response_id` resolved). A model served by an Anthropic upstream is counted by
 * Anthropic, on the request translated as it would be sent, through the count above (so with its
 * fallback to our estimate); any other model, or none named (OpenAI's `model` is optional here),
 * gets our estimate: the tokenizer used for usage plus the per-message framing. Free like the count
 * above, and bounded the same way.
 */
export async function countResponseTokens(
  deps: Parameters<typeof countMessageTokens>[0],
  chat: Record<string, unknown>,
  headers: Headers,
  signal: AbortSignal,
  turn: { keyId: string; accountId: string },
  allowed: readonly string[] | null,
): Promise<Response> {
  const messages = chat.messages as Record<string, unknown>[];
  leaveOutToolResultMedia(messages, "openai");
  checkOpenAIContent(chat);
  const name = typeof chat.model === "string" ? chat.model : undefined;
  const model = name === undefined ? undefined : countedModel(deps.catalogue, name, allowed);
  const provider = model && deps.settings.providers.get(model.provider)!;
  const translated = model && provider!.kind === "anthropic" && model.upstream_api !== "images" ? openaiRequestToAnthropic(chat as ChatRequest, model.id, 1, upstreamTraits("anthropic", model)) : undefined;
  // Anthropic counts what the answer's request would send: instructions alone go as its one user
  // turn (openai-to-anthropic.ts). A request that would send no message at all gets our estimate.
  if (translated && translated.messages.length > 0) {
    const body: Record<string, unknown> = {};
    for (const field of ANTHROPIC_COUNT_FIELDS) if (translated[field] !== undefined) body[field] = translated[field];
    const counted = await countMessageTokens(deps, body, headers, signal, turn, allowed);
    const { input_tokens } = (await counted.json()) as { input_tokens: number };
    return inputTokens(input_tokens);
  }
  const text = promptText("openai", chat);
  countableBytes(deps.settings.limits.count_tokens_max_bytes, text);
  const tokens = await countInTurn(deps.counts, turn.keyId, text, signal, undefined, turn.accountId);
  return inputTokens(tokens + 4 * messages.length + 3);
}

/** The Responses API's count, as OpenAI answers it. */
function inputTokens(count: number): Response {
  return Response.json({ object: "response.input_tokens", input_tokens: count });
}

/** The model a count is for, refused as a request for that model would be (unknown 404, not the key's 403, embedding 400). */
function countedModel(catalogue: Catalogue, name: string, allowed: readonly string[] | null): ModelConfig {
  const model = catalogue.get(name);
  if (!model) throw new GatewayError(404, "not_found", `The model "${name.slice(0, 200)}" does not exist. GET /v1/models lists the available ids.`);
  if (allowed !== null && !modelAllowed(allowed, model.id)) throw new GatewayError(403, "permission", modelRefusal(allowed, model.id), NO_RETRY);
  if (model.category === "embedding") throw new GatewayError(400, "invalid_request", `The model "${model.id}" is an embedding model: it takes no messages.`);
  return model;
}

/** The prompt's bytes, refused past what a free count takes (as Anthropic answers a request over its size limit). */
function countableBytes(limit: number, text: string): number {
  const bytes = Buffer.byteLength(text);
  if (bytes > limit) throw new GatewayError(413, "request_too_large", `The prompt is too large to count: ${bytes} bytes of text; a token count takes at most ${limit}.`);
  return bytes;
}
