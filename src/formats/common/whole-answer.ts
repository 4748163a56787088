import type { StreamEvent } from "../../streaming/events.ts";
import type { Scrubber } from "../../log/scrub.ts";

/**
 * How a format has a whole answer too large for the request thread read somewhere else (the
 * embeddings list: openai-embeddings/embeddings-thread.ts). Once an answer's bytes pass
 * `thresholdBytes`, the attempt hands them over as they arrive; what comes back is what the
 * adapter's `decodeBody` would have made of them (events, and a `json` the format's `body`
 * reads), or the error it would have thrown.
 */
export interface WholeAnswerReader {
  readonly thresholdBytes: number;
  /**
   * One answer to `sent` (the body the upstream was sent) from the model `model` (its id, which the
   * answer names); undefined when nothing can take it, and it is read on the request thread.
   */
  open(sent: unknown, model: string, scrub: Scrubber): WholeAnswerSink | undefined;
}

export interface WholeAnswerSink {
  /**
   * The answer's next bytes, which the caller gives up: a view that spans its whole buffer may be
   * moved to another thread (and be empty here afterwards), any other is copied.
   */
  push(bytes: Uint8Array): void;
  /** Every byte is in: the decoded answer, or (rejected) why it is unreadable. */
  finish(): Promise<{ json: unknown; events: StreamEvent[] }>;
  /** The answer is given up (deadline, client gone, too large): what was handed over is let go. */
  drop(): void;
}
