import type { StreamEvent } from "./events.ts";
import type { SseEvent } from "./sse-parser.ts";

/**
 * What a decoder made of one upstream frame: the events it means, and its parsed JSON (undefined
 * when not JSON), which only relays read. A text frame read on a template
 * (text-frame-template.ts) is parsed only when `parsed` is read.
 */
export interface DecodedEvents {
  readonly parsed: unknown;
  readonly events: StreamEvent[];
  /**
   * The events are not all the frame said (the gateway took some out: images past what the request
   * was held for): relays write them anew, never the frame as it came.
   */
  readonly rewritten?: true;
}

/** What every encoder needs to know about the answer it is writing. */
export interface EncodeContext {
  /** Response id minted by the gateway (chatcmpl-… / msg_…). */
  id: string;
  /** Unix seconds. */
  created: number;
  /** The model id the client named (the gateway's, not the upstream's). */
  model: string;
  /**
   * Prompt tokens as guessed from the request's size (about 4 bytes a token), for Anthropic
   * clients' `message_start` when the upstream reports usage only at the end (OpenAI does):
   * Claude Code sizes its context from that frame.
   */
  inputTokensEstimate?: number;
  /** OpenAI clients: whether the client asked for the usage chunk (stream_options.include_usage). */
  includeUsage: boolean;
  /** OpenAI clients that offered legacy `functions`: a call is written as `function_call` (formats/openai-chat/legacy-functions.ts). */
  legacyFunctions?: boolean;
  /**
   * OpenAI chat clients' custom tools by name (formats/openai-chat/chat-custom-tools.ts): a call to
   * one, which reaches the union as a call of `{"input": …}`, is written as a custom call.
   */
  customTools?: ReadonlySet<string>;
}

/**
 * The client side of the stream. Encoders turn events into frames; relays (client format
 * equals the upstream's) forward the upstream frame itself and use the events only to learn.
 */
export interface ClientSink {
  /**
   * Relays only: the frame as it goes to the client, for a frame its decoder read on the answer's
   * text template as meaning `text` alone (providers/provider.ts, StreamDecoder.readText; most
   * frames of an answer): the vendor's own bytes, with our id and model. Undefined: the frame is
   * decoded and handed to `frame`. The meter decodes skimmed frames later, only if it needs their
   * text to estimate usage the upstream never reported.
   */
  skim?(raw: SseEvent, text: string): string | undefined;
  /** One upstream frame and what its decoder made of it. */
  frame(raw: SseEvent, decoded: DecodedEvents): string;
  /** An event the gateway produced itself (estimated usage, an error). */
  event(e: StreamEvent): string;
  /**
   * The failure frame carries the answer's usage (the Responses API's `response.failed`): the
   * stream hands it what the failed answer is charged first (see StreamAnswerOptions.failureUsage).
   */
  readonly usageOnFailure?: boolean;
  /**
   * Closing frames after a normal end. A promise only where something must happen before them
   * (the Responses API keeps the answer first, in a store that may be remote).
   */
  end(): string | Promise<string>;
  keepAlive(): string;
}
