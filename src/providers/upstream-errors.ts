import { ContextLengthError, GatewayError, NO_RETRY, type AnthropicErrorDetails, type OpenAIErrorDetail } from "../streaming/gateway-error.ts";
import type { Scrubber } from "../log/scrub.ts";

/** The gateway's words for a vendor's rate limit and overload, said with a status or in a stream. */
export const RATE_LIMITED_WORDS = "The upstream provider is rate limiting the gateway. Retrying is appropriate.";
export const OVERLOADED_WORDS = "The upstream provider is overloaded. Retrying is appropriate.";

/** A vendor's 403 about the request's content: its moderation, a content filter or policy, a safety system. */
const CONTENT_REFUSAL = /\b(?:moderation|moderated|content[ _-]?(?:filter|policy|management)|flagged|safety|blocked)\b/i;

/**
 * An upstream's refusal, in the spec's statuses. A request the vendor found malformed is the
 * client's to fix (400), with the vendor's words (scrubbed: see log/scrub.ts) saying what to fix;
 * anything on the vendor's side, our key included, is a 502 that costs nothing and says nothing
 * of the vendor's internals.
 */
export function upstreamStatusError(status: number, detail: string | undefined, scrub: Scrubber, openai?: OpenAIErrorDetail, details?: AnthropicErrorDetails): GatewayError {
  const scrubbed = detail ? scrub.forClient(detail) : "";
  const said = scrubbed ? `: ${scrubbed}` : "";
  // The numbers are read from the vendor's own words (before scrubbing, which keeps numbers anyway).
  const tooLong = (status === 400 || status === 413 || status === 422) && detail ? contextLengthError(detail, said) : undefined;
  if (tooLong) return tooLong;
  if (status === 400 || status === 422) return new GatewayError(400, "invalid_request", `The upstream provider rejected the request${said}`, undefined, openai, details);
  if (status === 413) return new GatewayError(413, "request_too_large", "The request is too large for the upstream provider.");
  if (status === 429) return new GatewayError(502, "overloaded", RATE_LIMITED_WORDS);
  if (status === 529 || status === 503) return new GatewayError(502, "overloaded", OVERLOADED_WORDS);
  // The vendor refused the gateway's own key, or does not know the model or path it was
  // configured with: a client's retry meets the same refusal. `x-should-retry: false` is the
  // header both official SDKs obey over their default retries of a 502.
  // A 403 of a content filter or moderation is a refusal of what was asked: said so, with the
  // vendor's scrubbed words, not as the operator's credentials (a key-pool probe: a content filter's
  // 403 told the client the credentials failed). Any other 403 (a model or region the vendor
  // account may not use, a key without a permission) is the operator's to fix, and its words stay
  // out: they name the operator's project and the model behind the gateway's alias (a review).
  if (status === 403 && ((openai?.code === "content_filter") || (detail !== undefined && CONTENT_REFUSAL.test(detail.slice(0, 4096))))) {
    return new GatewayError(502, "upstream", `The upstream provider refused this request (status 403)${said}${said && /[.!?]$/.test(said) ? "" : "."} Retrying the same request will not help.`, NO_RETRY);
  }
  if (status === 401 || status === 403) return new GatewayError(502, "upstream", `The upstream provider refused the gateway's credentials (status ${status}). Retrying will not help until the gateway's operator fixes them.`, NO_RETRY);
  if (status === 404) return new GatewayError(502, "upstream", "The upstream provider does not know the model or endpoint the gateway is configured with (status 404). Retrying will not help until the gateway's operator fixes it.", NO_RETRY);
  return new GatewayError(502, "upstream", `The upstream provider failed (status ${status}). Retrying is appropriate.`);
}

/**
 * The `code` and `param` of an OpenAI-shaped error body (`{"error": {"code", "param"}}`), for
 * OpenAI clients of a request the vendor refused as malformed: SDKs and agent frameworks act on
 * the code (`context_length_exceeded`, `invalid_value`…). Only identifier-like values pass: a
 * code is an enum, a param a field path, never free text.
 */
export function openaiErrorDetail(body: unknown): OpenAIErrorDetail | undefined {
  const error = (body as { error?: { code?: unknown; param?: unknown } } | null)?.error;
  if (!error || typeof error !== "object") return undefined;
  const code = typeof error.code === "string" && /^[A-Za-z0-9_.-]{1,64}$/.test(error.code) ? error.code : undefined;
  const param = typeof error.param === "string" && /^[A-Za-z0-9_.[\]-]{1,128}$/.test(error.param) ? error.param : undefined;
  return code || param ? { code, param } : undefined;
}

/**
 * The `error_code` of an Anthropic error body's `details` (`{"error": {"details": {"error_code":
 * "image_dimensions_too_large"}}}`), for Anthropic clients of a request the vendor refused: its SDK
 * reads it as the error's `errorCode`. Only an identifier passes, nothing else of the object (which
 * may quote the request).
 */
export function anthropicErrorDetails(body: unknown): AnthropicErrorDetails | undefined {
  const code = (body as { error?: { details?: { error_code?: unknown } } } | null)?.error?.details?.error_code;
  return typeof code === "string" && /^[A-Za-z0-9_.-]{1,64}$/.test(code) ? { error_code: code } : undefined;
}

/** A vendor's error frame mid-stream, as the client sees it: our sentence, then the vendor's scrubbed words. */
export function upstreamStreamErrorMessage(lead: string, vendorMessage: unknown, scrub: Scrubber): string {
  const scrubbed = typeof vendorMessage === "string" ? scrub.forClient(vendorMessage) : "";
  return scrubbed ? `${lead}: ${scrubbed}` : `${lead}.`;
}

/**
 * The vendors' context-window refusals, with their numbers, so clients of either format get the
 * wording they recognise whichever vendor refused (see ContextLengthError).
 */
function contextLengthError(whole: string, said: string): ContextLengthError | undefined {
  const message = `The upstream provider rejected the request${said}`;
  // The vendors' sentences come first and are short: the lazy patterns below, over 64 KB of
  // repeats, were quadratic (287 ms, an audit).
  const detail = whole.length > 4096 ? whole.slice(0, 4096) : whole;
  let m = /prompt is too long: (\d+) tokens > (\d+) maximum/i.exec(detail);
  if (m) return new ContextLengthError(Number(m[1]), undefined, Number(m[2]), message);
  m = /input length and `?max_tokens`? exceed context limit: (\d+) \+ (\d+) > (\d+)/i.exec(detail);
  if (m) return new ContextLengthError(Number(m[1]), Number(m[2]), Number(m[3]), message);
  // OpenAI: "This model's maximum context length is 128000 tokens. However, you requested 140000 tokens (130000 in the messages, 10000 in the completion)…"
  m = /maximum context length is (\d+) tokens.*?(\d+) tokens \((\d+) in the messages(?:, (\d+) in the completion)?/is.exec(detail);
  if (m) return new ContextLengthError(Number(m[3]), m[4] === undefined ? undefined : Number(m[4]), Number(m[1]), message);
  // "…However, your messages resulted in 130000 tokens…"
  m = /maximum context length is (\d+) tokens.*?resulted in (\d+) tokens/is.exec(detail);
  if (m) return new ContextLengthError(Number(m[2]), undefined, Number(m[1]), message);
  return undefined;
}
