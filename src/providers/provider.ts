import { MAX_ANSWER_DEPTH, nestsTooDeep } from "../formats/common/json-shape.ts";
import type { ResolvedProvider } from "../config/load-config.ts";
import type { StreamEvent } from "../streaming/events.ts";
import type { SseEvent } from "../streaming/sse-parser.ts";
import type { DecodedEvents } from "../streaming/client-sink.ts";
import type { UpstreamKind } from "../formats/common/wire-types.ts";
import type { Scrubber } from "../log/scrub.ts";

/** One decoded upstream frame: the parsed JSON (for relays) and what it means (for everyone else). */
export interface DecodedFrame extends DecodedEvents {
  /** The vendor's own end of the answer (OpenAI's `[DONE]`, Anthropic's `message_stop`): nothing after it belongs to it. */
  last?: true;
  /**
   * The frame ends a block of content without saying anything (Anthropic's `content_block_stop`):
   * text the stream holds back (split-secret-guard.ts) must go out before it, in its block.
   */
  endsBlock?: true;
}

/** Thrown by decoders for frames that are not what the vendor's format promises. */
export class UpstreamProtocolError extends Error {}

/**
 * What a vendor kind must provide. Adapters build requests and decode answers into the
 * event union; they never write client frames.
 */
export interface ProviderAdapter {
  format: UpstreamKind;
  /** False for APIs that answer in one body only; streamed clients then get frames made from it. */
  streams?: boolean;
  /**
   * False for an API of the provider's kind whose answers are not that kind's client format (the
   * Responses API behind an OpenAI-kind provider): its frames and bodies are never relayed as they
   * came to a client of that format, always encoded from the events.
   */
  relayable?: false;
  buildRequest(provider: ResolvedProvider, body: unknown, clientHeaders: Headers): { url: string; headers: Record<string, string>; body: string };
  /**
   * The vendor's model list with the provider's key: the cheapest call that tells whether a key
   * is accepted (a disabled pool key is probed with it; see providers/key-pools.ts).
   */
  modelsRequest?(provider: ResolvedProvider): { url: string; headers: Record<string, string> };
  /**
   * A fresh decoder per stream: decoders keep per-answer state (tool-call numbering). `scrub`: the
   * gateway's scrubber, for a vendor's words that reach the client (SHAPES_ONLY outside a gateway);
   * `sent`: the body the upstream was sent (what its counts may need to be read right).
   */
  createStreamDecoder(scrub?: Scrubber, sent?: unknown): StreamDecoder;
  /** `sent` is the body the upstream was sent, for answers that must match it (one embedding per input). */
  decodeBody(body: unknown, sent?: unknown, scrub?: Scrubber): StreamEvent[];
  /** The vendor's error message from an error body, for the log; never shown raw to clients. */
  errorMessage(body: unknown): string | undefined;
}

/**
 * A stream's decoder. `readText`, where the decoder keeps a text template
 * (streaming/text-frame-template.ts): a frame's text when it is the same JSON as a text frame of
 * this answer already parsed, with another text; otherwise undefined, and nothing is decoded.
 * What it reads is what decoding the frame would say (a TemplateTextFrame of that text).
 */
export type StreamDecoder = ((frame: SseEvent) => DecodedFrame) & { readText?: (frame: SseEvent) => string | undefined };

/**
 * A text frame read on its answer's template (streaming/text-frame-template.ts): its one event,
 * and its JSON parsed only if a relay reads `parsed`.
 */
export class TemplateTextFrame implements DecodedFrame {
  readonly events: StreamEvent[];
  readonly #data: string;
  #parsed: unknown;
  constructor(data: string, text: string) {
    this.#data = data;
    this.events = [{ type: "text", text }];
  }
  get parsed(): unknown {
    return (this.#parsed ??= parseFrameJson(this.#data));
  }
}

export function parseFrameJson(data: string): unknown {
  if (nestsTooDeep(data)) throw new UpstreamProtocolError(`upstream sent a frame nested deeper than ${MAX_ANSWER_DEPTH} levels`);
  try {
    return JSON.parse(data);
  } catch {
    throw new UpstreamProtocolError("upstream sent a frame that is not valid JSON");
  }
}

/** A vendor's string, or "" for anything else it put there (a number or object must not reach a client as text). */
export function vendorText(value: unknown): string {
  return typeof value === "string" ? value : "";
}

/** A JSON object (not an array, not null): what an answer body or one of its parts must be. */
export function isRecord(value: unknown): value is Record<string, any> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
