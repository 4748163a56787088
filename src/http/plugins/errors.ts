import { Elysia } from "elysia";
import { endTurnOfRequest } from "../../limits/parse-turns.ts";
import type { TSchema } from "@sinclair/typebox";
import { firstBodyError } from "./first-body-error.ts";
import type { ErrorKind } from "../../streaming/events.ts";
import { openaiErrorBody } from "../../formats/openai-chat/encode-openai.ts";
import { anthropicErrorBody } from "../../formats/anthropic-messages/encode-anthropic.ts";
import { ContextLengthError, GatewayError, type AnthropicErrorDetails, type OpenAIErrorDetail } from "../../streaming/gateway-error.ts";
import type { Logger } from "../../log/log.ts";

/** Where a request URL's path starts, found without parsing the URL. */
function pathStart(url: string): number {
  return url.indexOf("/", url.indexOf("//") + 2);
}

/** Whether a request URL's path starts with `prefix`. */
function pathStartsWith(url: string, prefix: string): boolean {
  return url.startsWith(prefix, pathStart(url));
}

/**
 * Anthropic SDK clients get Anthropic-shaped errors; everyone else gets OpenAI's shape. The
 * models routes serve both SDKs and tell them apart by `anthropic-version` (routes/models.ts), so
 * their errors (an unknown id, a bad key, a rate limit) follow the same header: the Anthropic SDK's
 * `models.retrieve` got OpenAI's shape (an SDK probe, twenty-eighth session). So do paths outside
 * the OpenAI format's own (OPENAI_ONLY).
 */
export function isAnthropicClient(path: string, headers: Headers): boolean {
  return path.startsWith("/v1/messages") || (headers.has("anthropic-version") && !OPENAI_ONLY.some((prefix) => path.startsWith(prefix)));
}

/**
 * Paths only the OpenAI format has: their errors are OpenAI's whatever the headers say. Elsewhere
 * (the models routes, and paths the gateway does not serve, such as the Anthropic SDK's
 * `beta.files`) `anthropic-version` marks an Anthropic SDK, whose error classes read Anthropic's
 * shape (an SDK probe, thirty-fourth session: `GET /v1/files` answered it in OpenAI's).
 */
const OPENAI_ONLY = ["/v1/chat/", "/v1/responses", "/v1/embeddings", "/v1/completions", "/v1/images", "/v1/audio"];

function isAnthropicRequest(request: Request): boolean {
  return isAnthropicClient(request.url.slice(pathStart(request.url)), request.headers);
}

export function errorResponse(anthropic: boolean, status: number, kind: ErrorKind, message: string, headers?: Record<string, string>, openai?: OpenAIErrorDetail, details?: AnthropicErrorDetails): Response {
  const body = anthropic ? anthropicErrorBody(kind, message, details) : openaiErrorBody(kind, message, openai);
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });
}

/** The status → kind mapping for errors that Elysia raises before our handlers run. */
const KIND_OF_STATUS: Record<number, ErrorKind> = {
  400: "invalid_request",
  401: "authentication",
  403: "permission",
  404: "not_found",
  413: "request_too_large",
  422: "invalid_request",
  429: "rate_limit",
  // A store that cannot take the write now (store/sqlite/file-identity.ts).
  503: "overloaded",
};

/**
 * Every error leaves as a JSON body in the client's format with the spec's status. Unknown
 * failures are logged in full and answered with a message that carries no internals.
 */
export function errorsPlugin(
  log: Logger,
  onRejected: (request: Request, status: number) => void,
  onAnswered?: (request: Request, status: number, error: unknown) => void,
  /** Whether an error says a store (the database, Redis) cannot be used right now: a 503 to retry, not a 500 (app.ts knows the stores). */
  storeUnavailable?: (error: unknown) => boolean,
) {
  return new Elysia({ name: "switchyard/errors" }).onError({ as: "global" }, ({ code, error, request }) => {
    // A large body's turn (limits/parse-turns.ts) ends with a refusal before its vendor request.
    endTurnOfRequest(request);
    const response = storeUnavailable?.(error) ? unavailableResponse(error, request, log) : toResponse(code, error, request, log);
    if (!(error instanceof GatewayError && error.recorded)) onRejected(request, response.status);
    onAnswered?.(request, response.status, error);
    return response;
  });
}

/**
 * A store that cannot be used now (PostgreSQL unreachable or read-only, Redis down): 503 with
 * Retry-After, as the model routes answer, not 500 "failed to process" (an admin top-up during a
 * database stall was a 500 though it had committed; a scale-out probe). A change may or may not
 * have been made: a top-up or debit retried with the same Idempotency-Key is made once; other changes are read back first.
 */
function unavailableResponse(error: unknown, request: Request, log: Logger): Response {
  log("warn", "store unavailable", { error: error instanceof Error ? error.message : String(error), clientRequestId: request.headers.get("x-request-id") ?? undefined });
  const change = request.method !== "GET" && request.method !== "HEAD";
  // Top-ups and debits take an Idempotency-Key: sent again with it, each is made once. Any other
  // change is read back before it is sent again. (A debit was told to read it back, which a
  // balance that requests move all the time cannot answer.)
  const keyed = /\/(credits|debits)(?:$|\?)/.exec(request.url)?.[1];
  const advice = !change ? "" : keyed
    ? ` The ${keyed === "credits" ? "top-up" : "debit"} may or may not have been made: retry with the same Idempotency-Key (made once), or read the balance first.`
    : " The change may or may not have been made: read it back before sending it again.";
  const message = `The gateway cannot use its database right now (unreachable, or it cannot take writes).${advice} Retry in a few seconds.`;
  return errorResponse(isAnthropicRequest(request), 503, "overloaded", message, { "retry-after": "5" });
}

function toResponse(code: unknown, error: unknown, request: Request, log: Logger): Response {
  const anthropic = isAnthropicRequest(request);
  if (error instanceof ContextLengthError) {
    if (anthropic) return errorResponse(true, error.status, error.kind, error.anthropicMessage, error.headers);
    // OpenAI names the field at fault: the chat's messages, the Responses API's input.
    const param = pathStartsWith(request.url, "/v1/responses") ? "input" : "messages";
    return errorResponse(false, error.status, error.kind, error.openaiMessage, error.headers, { code: "context_length_exceeded", param });
  }
  if (error instanceof GatewayError) {
    const response = errorResponse(anthropic, error.status, error.kind, error.message, error.headers, error.openai, error.details);
    for (const cookie of error.cookies ?? []) response.headers.append("set-cookie", cookie);
    return response;
  }
  // Elysia wraps whatever a parse hook throws in a ParseError (400, "Bad Request") and keeps the
  // original as `cause`; without unwrapping, the json-body plugin's 413 for a body sent without
  // Content-Length became a 400, and its UTF-8 and nesting messages were lost.
  const cause = (error as { cause?: unknown } | null)?.cause;
  if (code === "PARSE" && cause instanceof GatewayError) return errorResponse(anthropic, cause.status, cause.kind, cause.message, cause.headers, cause.openai, cause.details);
  switch (code) {
    case "PARSE":
      return errorResponse(anthropic, 400, "invalid_request", "The request body is not valid JSON.");
    case "VALIDATION": {
      // OpenAI names the field at fault in `param` (`messages[0].role`); its SDK users read it.
      const param = validationParam((error as { valueError?: { path?: string } }).valueError?.path);
      return errorResponse(anthropic, 400, "invalid_request", describeValidation(error), undefined, param ? { param } : undefined);
    }
    case "NOT_FOUND":
      return errorResponse(anthropic, 404, "not_found", `No route for ${request.method} ${new URL(request.url).pathname}.`);
  }
  const status = (error as { status?: unknown })?.status;
  if (typeof status === "number" && KIND_OF_STATUS[status]) {
    return errorResponse(anthropic, status, KIND_OF_STATUS[status]!, "The request could not be processed.");
  }
  log("error", "unhandled error", { code: String(code), error: error instanceof Error ? error.stack : String(error), clientRequestId: request.headers.get("x-request-id") ?? undefined });
  return errorResponse(anthropic, 500, "internal", "The gateway failed to process the request.");
}

function describeValidation(error: unknown): string {
  return validationMessage((error as { valueError?: { path?: string; message?: string; value?: unknown; schema?: { error?: unknown } } }).valueError);
}

/** A failure's path as OpenAI writes a `param`: `/messages/0/role` → `messages[0].role`; none for the body itself. */
export function validationParam(path: string | undefined): string | undefined {
  if (!path || path === "/") return undefined;
  const param = path.replace(/^\//, "").split("/").map((part, i) => (/^\d+$/.test(part) ? `[${part}]` : i === 0 ? part : `.${part}`)).join("");
  return /^[A-Za-z0-9_.[\]-]{1,128}$/.test(param) ? param : undefined;
}

type FirstError = { path?: string; message?: string; value?: unknown; schema?: { error?: unknown; anyOf?: unknown } };

/** A body's first failure against its schema, in the words every route answers with (Elysia's or plugins/first-body-error.ts's). */
export function validationMessage(first: FirstError | undefined): string {
  if (first?.path !== undefined) {
    first = insideUnion(first);
    const field = first.path!.replace(/^\//, "").replaceAll("/", ".") || "body";
    // A schema may say in its `error` what its field must be (a union's own message is only
    // "Expected union value"); a missing field keeps "Expected required property".
    const own = first.value !== undefined && typeof first.schema?.error === "string" ? first.schema.error : undefined;
    return `Invalid request: ${field}: ${own ?? unionWords(first) ?? first.message ?? "invalid value"}.`;
  }
  return "Invalid request body.";
}

/** A JSON value's kind as a schema's `type` names it. */
function kindOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value === "number" && Number.isInteger(value) ? "integer" : typeof value;
}

/** The schema kinds a union's members take, in order: `type`, or a literal's value. */
function unionMembers(first: FirstError): { schema: unknown; kind: string | undefined; word: string }[] | undefined {
  const anyOf = first.schema?.anyOf;
  if (first.message !== "Expected union value" || !Array.isArray(anyOf) || first.value === undefined) return undefined;
  const WORDS: Record<string, string> = { string: "a string", array: "an array", object: "an object", number: "a number", integer: "a whole number", boolean: "true or false", null: "null" };
  return anyOf.map((member: { type?: unknown; const?: unknown }) => {
    if (member.const !== undefined) return { schema: member, kind: undefined, word: JSON.stringify(member.const) };
    const kind = typeof member.type === "string" ? member.type : undefined;
    return { schema: member, kind, word: (kind && WORDS[kind]) ?? "another shape" };
  });
}

/**
 * A union whose value is of one member's kind (an object or an array) failed inside that member:
 * its first failure there says what to fix (`stream_options.include_usage: Expected boolean`)
 * where the union's says only "Expected union value". Found as a large body's is
 * (first-body-error.ts): the compiled checker, the interpreted one over the failing part only.
 */
function insideUnion(first: FirstError): FirstError {
  const members = unionMembers(first);
  const kind = kindOf(first.value);
  if (!members || (kind !== "object" && kind !== "array")) return first;
  const same = members.filter((m) => m.kind === kind);
  if (same.length !== 1) return first;
  const inner = firstBodyError(same[0]!.schema as TSchema, first.value, first.path);
  return inner ? insideUnion(inner) : first;
}

/** What a union takes and what was sent, as OpenAI says it ("expected one of a string or array …, but got an integer"). */
function unionWords(first: FirstError): string | undefined {
  const members = unionMembers(first);
  if (!members) return undefined;
  const words = [...new Set(members.map((m) => m.word))];
  const list = words.length > 1 ? `${words.slice(0, -1).join(", ")} or ${words.at(-1)}` : words[0];
  const kind = kindOf(first.value);
  // Among literal choices a word is named as sent ("tool"); otherwise its kind is.
  const literal = members.some((m) => m.kind === undefined) && (typeof first.value === "string" || typeof first.value === "number" || typeof first.value === "boolean");
  const got = literal ? JSON.stringify(first.value).slice(0, 64)
    : kind === "integer" ? "a number" : kind === "array" ? "an array" : kind === "object" ? "an object" : kind === "null" ? "null" : `a ${kind}`;
  return `must be ${list} (got ${got})`;
}
