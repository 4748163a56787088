import type { ErrorKind } from "./events.ts";

/**
 * An error whose message is safe to show a client. Anything else that escapes a handler is
 * logged and answered with a generic message, so internals never reach the wire.
 */
/** Headers that tell a client's SDK not to retry (openai-node and the Anthropic SDK obey it). */
export const NO_RETRY: Readonly<Record<string, string>> = { "x-should-retry": "false" };

export class GatewayError extends Error {
  /** Set once the request that failed already left its usage record (it reached the pipeline). */
  recorded = false;
  /** Set-Cookie headers the error's answer carries, each its own (the console ends planted cookies with its 401). */
  cookies: readonly string[] | undefined;

  constructor(
    readonly status: number,
    readonly kind: ErrorKind,
    message: string,
    readonly headers?: Record<string, string>,
    /** OpenAI's `code` and `param` for OpenAI-format clients (`model_not_found`, an upstream's own). */
    readonly openai?: OpenAIErrorDetail,
    /** Anthropic's `error.details` for Anthropic-format clients (its SDK reads `details.error_code`). */
    readonly details?: AnthropicErrorDetails,
  ) {
    super(message);
  }

  /** The same error with other headers (a retry-after added, a no-retry taken off): everything else kept. */
  withHeaders(headers: Record<string, string> | undefined): GatewayError {
    return new GatewayError(this.status, this.kind, this.message, headers, this.openai, this.details);
  }
}

/** What an Anthropic error says beside its message: a machine-readable `error_code` and what goes with it. */
export interface AnthropicErrorDetails {
  error_code: string;
  [field: string]: unknown;
}

/** What OpenAI's error object says beside its message: a machine-readable `code` and the field at fault. */
export interface OpenAIErrorDetail {
  code?: string;
  param?: string;
}

/**
 * A prompt that does not fit a model's context window, found by the gateway or reported by the
 * upstream. It keeps the numbers so each format gets the wording its clients act on: Anthropic
 * clients (Claude Code, the SDK) match `prompt is too long: N tokens > M maximum` to compact the
 * conversation, and `input length and \`max_tokens\` exceed context limit: N + M > L` to retry
 * with a smaller max_tokens.
 */
export class ContextLengthError extends GatewayError {
  constructor(
    readonly promptTokens: number,
    /** The answer limit that did not fit beside the prompt; undefined when the prompt alone is too long. */
    readonly maxTokens: number | undefined,
    readonly contextLength: number,
    message: string,
  ) {
    super(400, "invalid_request", message);
  }

  /**
   * OpenAI's wording and code (`context_length_exceeded`), which agent frameworks match to compact
   * the conversation (LangChain, LiteLLM: the code, or "maximum context length" in the message).
   */
  get openaiMessage(): string {
    if (this.maxTokens === undefined || this.promptTokens >= this.contextLength) {
      return `This model's maximum context length is ${this.contextLength} tokens. However, your messages resulted in ${this.promptTokens} tokens. Please reduce the length of the messages.`;
    }
    return `This model's maximum context length is ${this.contextLength} tokens. However, you requested ${this.promptTokens + this.maxTokens} tokens (${this.promptTokens} in the messages, ${this.maxTokens} in the completion). Please reduce the length of the messages or completion.`;
  }

  get anthropicMessage(): string {
    if (this.maxTokens === undefined || this.promptTokens >= this.contextLength) {
      return `prompt is too long: ${this.promptTokens} tokens > ${this.contextLength} maximum`;
    }
    return `input length and \`max_tokens\` exceed context limit: ${this.promptTokens} + ${this.maxTokens} > ${this.contextLength}, decrease input length or \`max_tokens\` and try again`;
  }
}

/** The client left before its answer (499, nginx's status for it): nobody reads what is said. */
export const clientClosed = () => new GatewayError(499, "invalid_request", "The client closed the request.");
