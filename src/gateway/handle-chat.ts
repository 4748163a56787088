import type { Catalogue } from "../catalogue/catalogue.ts";
import { decodedBodyBytes } from "../limits/body-bytes.ts";
import type { ModelConfig } from "../config/schema.ts";
import type { ClientFormat } from "../formats/format.ts";
import { assertAnthropicTextOnly, assertOpenAITextOnly, inResponsesTerms, leaveOutToolResultMedia, UnsupportedContentError } from "../formats/common/content-text.ts";
import { forward, type ForwardDeps, type ForwardRequest } from "./forward.ts";
import type { ActiveKey } from "../accounts/account-store.ts";
import { GatewayError, NO_RETRY } from "../streaming/gateway-error.ts";
import { checkAnthropicContent, checkOpenAIContent, refuseThread } from "./check-content.ts";
import { modelAllowed, modelRefusal } from "../accounts/model-access.ts";

export interface ChatCall {
  /** A chat format, or the Responses API over the chat request it was translated to. */
  format: ClientFormat;
  body: Record<string, unknown>;
  request: Request;
  principal: ActiveKey;
  /** Bun's per-request idle timeout hook; streams lift it so a quiet upstream does not cut them. */
  server: { timeout(request: Request, seconds: number): void } | null;
  /** Elysia's response settings; the admission plugin put the rate-limit headers there. */
  set: { headers: Record<string, unknown> };
  /** The Responses API's conversation, for vendor key affinity (ForwardRequest.chain). */
  chain?: ForwardRequest["chain"];
  /** The size of what is sent when it is not the request's (stored items added); else its Content-Length. */
  bodyBytes?: number;
  /** Of `bodyBytes`, what the body's JSON does not show (signed thinking carried beside it): counted again when the body is measured anew. */
  unseenBytes?: number;
}

/**
 * What both chat endpoints share after schema validation: the spec's 422 for an empty
 * conversation, 404 for unknown models (names resolve through aliases), 400 for embedding models,
 * for parts without the fields their type needs and for media input, then the forward pipeline.
 */
export async function handleChat(deps: ForwardDeps & { catalogue: Catalogue }, call: ChatCall): Promise<Response> {
  const { body, format } = call;
  const trace = deps.tracker?.of(call.request);
  if (trace && typeof body.model === "string") trace.modelAsked = body.model;
  // Refused before anything else of it: the gateway keeps no threads (check-content.ts).
  if (format.wire === "anthropic") refuseThread(body);
  const messages = body.messages as unknown[];
  if (messages.length === 0) throw new GatewayError(422, "invalid_request", "messages must contain at least one message.");

  const candidates = resolveCandidates(deps.catalogue, body, call.principal.models ?? null);
  const embedding = candidates.find((m) => m.category === "embedding");
  if (embedding) {
    throw new GatewayError(400, "invalid_request", `The model "${embedding.id}" is an embedding model: it answers POST /v1/embeddings, not chat. GET /v1/models lists each model's category.`);
  }

  // An image model answers with its images in the text of one answer, held and charged as one
  // image; n answers would be n answers' tokens for one answer's images (the others were lost).
  // Asked of an image model, n > 1 is refused; an image model among the fallbacks is asked for one.
  const first = candidates[0]!;
  if (typeof body.n === "number" && body.n > 1 && first.category === "image") {
    throw new GatewayError(400, "invalid_request", `n must be 1 for the image model "${first.id}": it makes one answer per request.`);
  }

  const openai = format.wire === "openai";
  // Images and files inside tool results are left out with a note; a user's own are refused below.
  const leftOut = leaveOutToolResultMedia(messages as unknown[], openai ? "openai" : "anthropic");
  if (openai) checkOpenAIContent(body);
  else checkAnthropicContent(body);
  try {
    if (openai) assertOpenAITextOnly(messages as { content?: unknown }[]);
    else assertAnthropicTextOnly(messages as { content: unknown }[], body.system);
  } catch (err) {
    if (err instanceof UnsupportedContentError) throw new GatewayError(400, "invalid_request", format.id === "openai-responses" ? inResponsesTerms(err) : err.message);
    throw err;
  }

  const response = await forward(deps, {
    format,
    body,
    // What is sent bounds the prompt: a body whose images were left out is measured again (its
    // images would have held up to a window's worth of credits every turn; a review).
    bodyBytes: leftOut ? Buffer.byteLength(JSON.stringify(body)) + (call.unseenBytes ?? 0) : call.bodyBytes ?? bodyBytesOf(call.request, body),
    headers: call.request.headers,
    signal: call.request.signal,
    candidates,
    principal: call.principal,
    // The call holds the server and the request a stream lifts the idle timeout of.
    idle: call,
    chain: call.chain,
    trace,
    // The answer is built with the route's headers (respond.ts); what is left (none, usually) is added below.
    route: call.set,
  });
  return withRouteHeaders(response, call.set);
}

/**
 * The request body's size in bytes: what it decoded to when it was sent compressed, else its
 * Content-Length, or the parsed body's UTF-8 length when it has none (a chunked body; its `length`
 * in UTF-16 units had held a third of what CJK and emoji cost).
 */
export function bodyBytesOf(request: Request, body: unknown): number {
  const decoded = decodedBodyBytes(request);
  if (decoded !== undefined) return decoded;
  const length = Number(request.headers.get("content-length"));
  return Number.isFinite(length) && length > 0 ? length : Buffer.byteLength(JSON.stringify(body));
}

/**
 * The models a request names: `model` first, then the `models` fallbacks, each once; every id is
 * checked before any upstream call: 404 for an unknown one (names resolve through aliases), then
 * 403 for a model the key may not use (`allowed`: the key's model list, null for every model).
 */
export function resolveCandidates(catalogue: Catalogue, body: Record<string, unknown>, allowed: readonly string[] | null = null): ModelConfig[] {
  const models = body.models as string[] | undefined;
  const named = typeof body.model === "string" ? [body.model] : [];
  // Most requests name one model: no set to build for them.
  const ids = models === undefined || models.length === 0 ? named : [...new Set([...named, ...models])];
  if (ids.length === 0) throw new GatewayError(400, "invalid_request", "model is required (or a models list).");
  const resolved = ids.map((id) => {
    const model = catalogue.get(id);
    if (!model) throw new GatewayError(404, "not_found", `The model "${id.slice(0, 200)}" does not exist. GET /v1/models lists the available ids.`, undefined, { code: "model_not_found" });
    return model;
  });
  // After every name resolved, so a request naming an unknown model gets the 404 either way.
  if (allowed !== null) {
    for (const model of resolved) if (!modelAllowed(allowed, model.id)) throw new GatewayError(403, "permission", modelRefusal(allowed, model.id), NO_RETRY);
  }
  return resolved;
}

/**
 * Elysia rebuilds any returned Response while `set.headers` has entries (a second Response
 * over a stream of the first one's body). Moved onto ours, the answer goes out as built; errors
 * thrown before the answer was built still get them from `set`. A JSON answer was built with them
 * already (respond.ts, `takeRouteHeaders`), so there is usually nothing left to move. The
 * answer's own headers win, as in Elysia.
 */
export function withRouteHeaders(response: Response, set: { headers: Record<string, unknown> }): Response {
  const headers = set.headers;
  // The answer's Headers are built only when there is something to add (respond.ts took them already).
  let own: Headers | undefined;
  for (const name in headers) {
    own ??= response.headers;
    if (!own.has(name)) own.set(name, String(headers[name]));
  }
  // A new empty object rather than a delete per name: deletes turn an object into a slow dictionary.
  if (own) set.headers = {};
  return response;
}
