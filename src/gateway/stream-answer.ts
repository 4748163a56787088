import type { StreamEvent } from "../streaming/events.ts";
import type { ClientSink, DecodedEvents } from "../streaming/client-sink.ts";
import { createSseParser, SseParseError } from "../streaming/sse-parser.ts";
import { TemplateTextFrame, UpstreamProtocolError, type DecodedFrame, type StreamDecoder } from "../providers/provider.ts";
import type { SseEvent } from "../streaming/sse-parser.ts";
import type { UsageMeter } from "../billing/usage-meter.ts";
import type { Ticker } from "../streaming/ticker.ts";
import { ResponseTooLargeError, type ChunkReader, type ReadResult } from "../transport/transport.ts";
import { ResponseFramingError } from "../transport/http1/response-parser.ts";
import { LedgerLostCut, ShutdownCut } from "./inflight.ts";
import { CUT_CONNECTION } from "../streaming/paced-body.ts";
import type { SplitSecretGuard } from "../streaming/split-secret-guard.ts";

/** How long a body may stay open after the vendor's end marker ([DONE], message_stop). */
export const END_GRACE_MS = 1_000;
const END: ReadResult = { done: true, value: undefined };
/**
 * Most the head's wait for the answer's first text holds for the client (see `streamAnswer`): past
 * it the head goes out with what came, and the client's pace bounds the rest. The opening events
 * are a few hundred bytes (a Responses `response.created` echoing long instructions and tools,
 * tens of KB); the wait reads the upstream as fast as it writes and nothing else bounds it, so an
 * upstream that repeats them (empty role chunks, usage-only chunks, pings) without a first text
 * was held whole for `keepalive_ms` (a raw-TCP probe: 18 MB in 3 s, 15 s by default).
 */
export const OPENING_HOLD_CHARS = 1024 * 1024;
/** What the pump hands back when it took the chunks itself (see `pump` in answerSource). */
const TAKEN = Symbol("taken");
/**
 * Bun's timers fire up to a millisecond early by `performance.now()` (three in four 20 ms timers
 * here, by as much as 0.8 ms): a check that the head's wait or a clock tick ran `keepAliveMs`
 * allows that much, or the keep-alive it is there for waits for the clock's next tick, a third of
 * keepalive_ms later (a CI run: the first write at 805 ms where keepalive_ms said 600).
 */
const TIMER_EARLY_MS = 2;
/**
 * What the pump hands the loop: the end it read, chunks it took itself (TAKEN), or the client's
 * pace to wait for (wrapped: a promise given to `resolve` would be waited for, not handed over).
 */
type Handed = ReadResult | typeof TAKEN | { backpressure: Promise<unknown> };

export type StreamOutcome =
  /** The upstream finished its answer and the client got every frame. */
  | "completed"
  /** The upstream failed or broke its format after the first byte; the client got an error frame. */
  | "failed"
  /** The client went away; the upstream request was aborted. */
  | "cancelled";

/**
 * The attempt's deadline as the stream sees it (gateway/deadline.ts): told when bytes arrive and
 * when the stream waits for the client instead; aborting it ends the upstream request.
 */
export interface StreamDeadline {
  touch(): void;
  pause(): void;
  resume(): void;
  abort(reason: unknown): void;
  clear(): void;
  /** Set once a limit passed (the upstream was too slow). */
  readonly expired: string | undefined;
}

/** How a failure the stream itself cannot name (an image download, say) is told to the client. */
export type FailureDescription = { event: StreamEvent & { type: "error" }; chargeable: boolean };

export interface StreamAnswerOptions {
  /** The upstream body: a stream's reader, or the upstream client's cheaper one. */
  upstream: ChunkReader;
  decode: StreamDecoder;
  /** A frame's data without the gateway's known secrets (the same string when it has none): relays pass vendor fields on. */
  redact?: (data: string) => string;
  /** The answer's text without a known secret split across frames (streaming/split-secret-guard.ts); one per stream. */
  guard?: SplitSecretGuard;
  sink: ClientSink;
  meter: UsageMeter;
  /** The gateway's shared timers (keep-alive checks). */
  ticker: Ticker;
  /** The attempt's one deadline; aborting it aborts the upstream request and with it the socket. */
  deadline: StreamDeadline;
  /** Usage to report when the upstream reported none (called once, at a normal end). */
  estimateUsage: () => Promise<StreamEvent | undefined>;
  /**
   * What a failed answer is charged for, as a usage event: handed to sinks whose failure frame
   * carries usage (`ClientSink.usageOnFailure`) before it, so that frame shows the bill.
   */
  failureUsage?: () => Promise<StreamEvent | undefined>;
  keepAliveMs: number;
  /**
   * Longest wait for a client that stopped reading: past it the answer is given up as if the
   * client had left (the upstream is not read meanwhile, so nothing piles up).
   */
  clientIdleMs: number;
  maxFrameBytes: number;
  /** Names failures thrown by `resolveImages` (the gateway's errors); others are named here. */
  describeFailure?: (err: unknown) => FailureDescription | undefined;
  /** Inlines image events (fetch, size cap); throws to fail the answer. Only called for frames with images. */
  resolveImages?: (events: StreamEvent[]) => Promise<void>;
  /**
   * Called once the upstream finished normally, before the closing frames are written: the
   * answer is settled durably here, so a client that saw the last frame was billed.
   */
  beforeEnd?: () => Promise<void>;
  /** Called once, when the first frame (not a keep-alive) is handed to the client. */
  onFirstWrite?: () => void;
  /**
   * Called exactly once, whatever ends the stream. `chargeable` is false when the failure is one
   * the client must not pay for; `cut`, when the gateway cut it itself (its stop past the grace,
   * or its ledger out of reach): billed as cancelled, logged as the gateway's own.
   */
  onDone: (outcome: StreamOutcome, reason?: string, chargeable?: boolean, cut?: boolean) => void;
  /**
   * The answer reasons out of sight (gateway/unseen-reasoning.ts): a client that leaves before the
   * vendor's end leaves the rest read, not relayed, up to the answer's limit and the deadline, and
   * the answer is settled then, with the vendor's own usage.
   */
  readToEndOnCancel?: () => boolean;
  /**
   * Where the stream says it is under way, so a gateway that stops past its grace ends it with
   * an error frame (gateway/inflight.ts) instead of resetting its connection mid-answer.
   */
  cuts?: { watch(end: () => void): void; unwatch(end: () => void): void; readonly reason?: ShutdownCut };
  /** The client's request: its leaving ends the head's wait for the answer's first text (see `streamAnswer`). */
  clientSignal?: AbortSignal;
  /**
   * What the stream holds in this process while its client is slower than its upstream: told the
   * bytes when it starts waiting for the client, 0 when the client caught up (or the stream ended).
   * The account's share of unread answers counts them (limits/unread-answers.ts).
   */
  stalled?: (bytes: number) => void;
  /**
   * Called once the answer is over, before its last write and close: the connection's idle
   * timeout, lifted for the stream, is put back here (a stream's request is still the
   * connection's until it closes; Bun keeps whatever it was set to for the connection's life).
   */
  beforeClose?: () => void;
}

/**
 * What a stream waiting for its client holds in this process besides the write it waits on: the
 * connection's buffers and the stream's own state. 1,000 streams of 8,192 frames never read held
 * ~170 KB each (twenty-fourth session's hostile-tenant probe, with the write they waited on); a
 * round figure above it, so the share errs towards refusing early rather than holding more.
 */
export const STALLED_STREAM_BYTES = 128 * 1024;

/** Where text the guard held is written when it is let go: no frame of the vendor's carries it. */
const HELD_TEXT: SseEvent = { event: undefined, data: "", id: undefined, retry: undefined };
/** Text the guard held, as a frame of its own that says nothing else (written anew, never relayed). */
const heldText = (text: string): DecodedFrame => ({ parsed: undefined, events: [{ type: "text", text }], rewritten: true });

/** An answer whose body (or the vendor's end marker) came before its finish. */
const ENDED_EARLY: StreamEvent & { type: "error" } = { type: "error", errorType: "upstream", message: "The upstream provider ended the answer early." };

/** What a client reads when the gateway stops under its answer (past the shutdown grace). */
export const SHUTDOWN_CUT = "The gateway is shutting down and cut this answer short. Retry the request.";
/** What a client reads when the gateway cut its answer because its ledger database is out of reach (inflight.ts, `fence`). */
export const LEDGER_CUT = "The gateway lost its connection to its ledger database and cut this answer short. Retry the request: another gateway process can answer it.";

/**
 * The one streaming pipeline: upstream bytes → SSE parser → provider decoder → usage meter →
 * client sink. The client side is one of Bun's direct streams: a single loop reads the upstream
 * and writes frames straight to the socket, waiting whenever the client is slower than the
 * upstream (write() returns a promise then), so an upstream is read only as fast as the client
 * takes frames. Once the first byte is out the status is fixed, so every failure becomes a frame.
 *
 * What the upstream already sent when the stream is made is taken first (resolved once that is
 * done): Bun sends a direct stream's head on its own unless the first write comes in the turn
 * the stream starts, so those frames go out with the head in one write. An answer that already
 * arrived whole (a short one, a fast upstream) is settled here too, and head, frames and end
 * leave in one write once its charge is durable, as a whole answer does.
 */
export async function streamAnswer(o: StreamAnswerOptions): Promise<ReadableStream<Uint8Array> | string> {
  const quietSince = performance.now();
  const source = await answerSource(o, quietSince);
  // Nothing of the answer itself yet (no bytes, or only the events that open it): the head waits
  // for it, for the same failure may still come that the early take meets (see `nextArrival`).
  while (source.opening()) {
    const left = quietSince + o.keepAliveMs - performance.now();
    const arriving = o.upstream.onReadable ? nextArrival(o, left) : readAhead(o, source, left);
    const arrived = typeof arriving === "string" ? arriving : await arriving;
    if (arrived === "cut") {
      // The gateway's stop ended the wait: nothing went to the client, so it is answered as a call
      // still waiting for its head is (a 503 to retry, nothing charged), not a 200 and an error frame.
      const why = o.cuts?.reason ?? new ShutdownCut();
      source.letGo(why);
      throw why;
    }
    if (arrived === "taken") continue;
    if (arrived !== "arrived") break;
    await source.takeArrived();
  }
  // An answer that failed in what had already arrived has sent the client nothing: the attempt
  // is given up instead, and the request is retried or falls back as on an error status. A client
  // that left meanwhile is not retried for: its stream is cancelled, as when it leaves later.
  const failed = o.clientSignal?.aborted ? undefined : source.failedBeforeStart();
  if (failed) throw new StreamFailedBeforeStart(failed);
  return source.whole() ?? (new ReadableStream(source) as ReadableStream<Uint8Array>);
}

/**
 * The stream stage holds the head until the answer itself begins (text, thinking, a tool call, an
 * image, its end) or fails, for at most `keepAliveMs` after the upstream's head. Nothing is lost
 * by waiting: a direct stream's head leaves with its first write, so the client got nothing before
 * the first frame or keep-alive anyway, and the first keep-alive still goes out `keepAliveMs` after
 * the head (`quietSince`); the opening events wait with it and leave together with the first text.
 * What the wait buys: a failure in that time is met by the early take, so the request is retried
 * on another key or falls back, or is a 502 that costs nothing, as docs/api.md promises until the
 * first byte, where it was a 200 with an error frame:
 * - a close right after the head, a malformed first frame in a later read, the idle limit (a
 *   raw-TCP probe: a close 20 ms after the head);
 * - a failure right after the events that open a stream: Anthropic's `overloaded_error` after
 *   `message_start`, OpenAI's Responses `response.failed` (a rate limit, an overload) or a cut after
 *   `response.created` and `response.in_progress`, which OpenAI writes at once, before the model
 *   has produced anything.
 * The client's leaving and the gateway's stop end the wait at once ("idle", "cut"). Readers without
 * `onReadable` (`fetch`'s, a decompressed body's) wait in `readAhead` instead. "arrived" without a
 * promise when something is there.
 */
function nextArrival(o: StreamAnswerOptions, waitMs: number): "arrived" | "idle" | Promise<"arrived" | "idle" | "cut"> {
  const reader = o.upstream;
  const client = o.clientSignal;
  if (!reader.onReadable || client?.aborted || waitMs <= 0) return "idle";
  let arrived = false;
  let wake: (() => void) | undefined;
  // Told at once when something is there already (the usual case: no timer, no promise).
  reader.onReadable(() => {
    arrived = true;
    wake?.();
  });
  if (arrived) return "arrived";
  return new Promise((resolve) => {
    const end = (why: "arrived" | "idle" | "cut") => {
      wake = undefined;
      clearTimeout(timer);
      client?.removeEventListener("abort", gone);
      o.cuts?.unwatch(cut);
      resolve(why);
    };
    const gone = () => end("idle");
    // The gateway's stop, with the client still there: "cut" (see streamAnswer).
    const cut = () => end(arrived ? "arrived" : client?.aborted ? "idle" : "cut");
    wake = () => end("arrived");
    const timer = setTimeout(gone, waitMs);
    client?.addEventListener("abort", gone);
    o.cuts?.watch(cut);
  });
}

/**
 * The same wait on a reader with `read()` only (an answer the upstream compressed although asked
 * for identity, decoded as it comes; `fetch`'s): one read, for at most `waitMs`. "taken" when it
 * came and was taken (or failed: a failure in the first bytes); else the read under way becomes
 * the relay loop's first (`adoptRead`), so no bytes are lost or reordered. A raw-TCP probe: a gzip
 * stream whose bytes were not gzip was a 200 with an error frame, never the next model.
 */
async function readAhead(
  o: StreamAnswerOptions,
  source: { adoptRead(read: Promise<ReadResult>): void; takeRead(read: ReadResult): Promise<void>; takeFailure(error: unknown): void },
  waitMs: number,
): Promise<"taken" | "idle" | "cut"> {
  const client = o.clientSignal;
  if (client?.aborted || waitMs <= 0) return "idle";
  const read = o.upstream.read();
  let stop: (why: "idle" | "cut") => void = () => {};
  const stopped = new Promise<"idle" | "cut">((resolve) => {
    const gone = () => stop("idle");
    const cut = () => stop(client?.aborted ? "idle" : "cut");
    const timer = setTimeout(gone, waitMs);
    stop = (why) => {
      clearTimeout(timer);
      client?.removeEventListener("abort", gone);
      o.cuts?.unwatch(cut);
      resolve(why);
    };
    client?.addEventListener("abort", gone);
    o.cuts?.watch(cut);
  });
  let outcome: ReadResult | "idle" | "cut" | { error: unknown };
  try {
    outcome = await Promise.race([read, stopped]);
  } catch (error) {
    outcome = { error };
  }
  stop("idle");
  if (outcome === "idle" || outcome === "cut") {
    source.adoptRead(read);
    return outcome;
  }
  if ("error" in outcome) source.takeFailure(outcome.error);
  else await source.takeRead(outcome);
  return "taken";
}

/** The controller Bun hands a direct stream's pull: writes go to the socket's buffer, flush and close send it. */
export interface DirectController {
  write(chunk: string): number | Promise<number>;
  flush(): number | Promise<number>;
  close(): void;
}

/**
 * The upstream failed the answer in what it had sent when the stream stage began, before anything
 * went to the client (an error frame right after the head, as Anthropic's `overloaded_error`
 * often comes; a connection cut, a malformed frame). Thrown by `streamAnswer` once the attempt is
 * let go (its connection dropped, nothing settled), for the caller to try again or fall back.
 */
export class StreamFailedBeforeStart extends Error {
  constructor(readonly event: StreamEvent & { type: "error" }) {
    super(event.message);
    this.name = "StreamFailedBeforeStart";
  }
}

/**
 * The direct stream's source behind `streamAnswer` (tests drive its pull with a controller of
 * their own). `quietSince`: when the client last got anything (the upstream's head), for the first keep-alive.
 */
export async function answerSource(o: StreamAnswerOptions, quietSince = performance.now()): Promise<{
  type: "direct";
  takeArrived(): Promise<void>;
  takeRead(read: ReadResult): Promise<void>;
  takeFailure(error: unknown): void;
  adoptRead(read: Promise<ReadResult>): void;
  opening(): boolean;
  letGo(reason: unknown): void;
  pull(controller: DirectController): Promise<void>;
  cancel(): void;
  whole(): string | undefined;
  failedBeforeStart(): (StreamEvent & { type: "error" }) | undefined;
}> {
  const reader = o.upstream;
  let out = "";
  let failure: (StreamEvent & { type: "error" }) | undefined;
  let done = false;
  let lastWrite = quietSince;
  let stopClock: (() => void) | undefined;
  let firstWrite = o.onFirstWrite;
  /** The first frame is handed to the client (written, or the whole body): told once. */
  const firstWriteDone = () => {
    if (!firstWrite) return;
    firstWrite();
    firstWrite = undefined;
  };

  let chargeable = true;
  /** The relay loop's read under way on a reader that only has `read()`: readRest takes its chunk. */
  let pendingRead: Promise<ReadResult> | undefined;
  /** The client left and the rest is read for its usage (readRest). */
  let readingRest = false;
  /** The vendor said its answer is over ([DONE], message_stop): what may follow is its body's end. */
  let vendorEnded = false;
  // Frames with images wait here for inlining (a fetch); all others pass straight through.
  const held: { frame: SseEvent; decoded: DecodedEvents; last?: boolean }[] = [];

  /** `last`: the frame is the vendor's end marker (the decoder's `last`). */
  const emit = (frame: SseEvent, decoded: DecodedEvents, last?: boolean) => {
    if (o.meter.imageRoom !== Number.POSITIVE_INFINITY) decoded = withinImages(decoded);
    for (const e of decoded.events) {
      o.meter.observe(e);
      if (e.type === "error") failure ??= e;
    }
    // The vendor's end marker with no finish before it ("data: [DONE]" alone, a Responses stream
    // cut to its [DONE]): the answer is over unfinished, as if the body had ended here. Failed now,
    // before the marker goes out, so that one in the first read is met by the early take (a 502
    // that costs nothing, or the next model) rather than a 200 whose only frame is an error, and
    // the client never reads an end marker followed by an error (a raw-TCP probe).
    if (last && !failure && !readingRest && !o.meter.finished) fail(ENDED_EARLY);
    // An upstream error frame is replaced by our own (`writeFailure`): vendor error text may carry internals.
    if (!failure) out += o.sink.frame(frame, decoded);
  };

  /**
   * The frame without the images past what the request was held for (usage-meter.ts,
   * limitImages): they are neither fetched nor sent nor charged; the rest of the frame (text, its
   * end, its usage) and of the answer goes on. Read only for answers priced per image.
   */
  const withinImages = (decoded: DecodedEvents): DecodedEvents => {
    let images = 0;
    for (const e of decoded.events) if (e.type === "image") images++;
    let room = o.meter.imageRoom;
    if (images <= room) return decoded;
    return { parsed: decoded.parsed, events: decoded.events.filter((e) => e.type !== "image" || room-- > 0), rewritten: true };
  };

  const guard = o.guard;
  /** A frame whose only meaning is text, with the text the guard lets the client see instead. */
  const shownText = (decoded: DecodedFrame, shown: string): DecodedFrame => ({
    parsed: decoded.parsed,
    events: shown === "" ? [] : [{ type: "text", text: shown }],
    rewritten: true,
  });
  /** Whether an event ends the answer's text run: anything but text and counts (a finish, a tool call, thinking). */
  const endsText = (e: StreamEvent) => e.type !== "text" && e.type !== "usage" && e.type !== "start";
  /**
   * A decoded frame through the guard. Text held back goes before the first thing that ends the
   * text: within the frame (a chunk with text and its finish, written anew), or ahead of it, as a
   * frame of its own, when the frame has no text (a block's end, which must come after it). A
   * frame that says nothing (a ping, an empty delta, usage alone) lets nothing go; an error drops
   * what is held.
   */
  const guarded = (frame: SseEvent, decoded: DecodedFrame): DecodedFrame => {
    const list = decoded.events;
    if (list.some((e) => e.type === "error")) {
      guard!.discard();
      return decoded;
    }
    if (!list.some((e) => e.type === "text")) {
      if (!decoded.endsBlock && !decoded.last && !list.some(endsText)) return decoded;
      const rest = guard!.flush();
      if (rest !== "") {
        // A frame of its own, of nothing but that text (relays write it as a delta of the block under way).
        if (held.length > 0) held.push({ frame: HELD_TEXT, decoded: heldText(rest) });
        else emit(HELD_TEXT, heldText(rest));
      }
      return decoded;
    }
    let events: StreamEvent[] | undefined;
    for (let i = 0; i < list.length; i++) {
      const e = list[i]!;
      let instead: StreamEvent[] | undefined;
      if (e.type === "text") {
        const shown = guard!.text(e.text);
        if (shown !== e.text) instead = shown === "" ? [] : [{ type: "text", text: shown }];
      } else if (endsText(e)) {
        const rest = guard!.flush();
        if (rest !== "") instead = [{ type: "text", text: rest }, e];
      }
      if (instead && !events) events = list.slice(0, i);
      if (events) events.push(...(instead ?? [e]));
    }
    return events ? { parsed: decoded.parsed, events, rewritten: true, ...(decoded.last ? { last: true } : {}) } : decoded;
  };

  /** What a relayed frame says, decoded only if the meter must count its text (one function for every frame). */
  const decodeEvents = (frame: SseEvent) => o.decode(frame).events;
  const readText = o.decode.readText;
  const skim = o.sink.skim?.bind(o.sink);
  const parser = createSseParser({
    // No frame longer than the answer's limit could make (usage-meter.ts, longestFrame).
    maxEventBytes: Math.min(o.maxFrameBytes, o.meter.longestFrame),
    onEvent(frame) {
      // Nothing after the vendor's end belongs to the answer.
      if (failure || vendorEnded) return;
      if (o.redact) {
        const data = o.redact(frame.data);
        if (data !== frame.data) frame = { ...frame, data };
      }
      o.meter.relayedFrame(frame.data.length);
      // Relayed as the vendor wrote it only when its decoder read it on the answer's text template
      // (text-frame-template.ts): the same JSON as a text frame already parsed, with another text,
      // so it means to the client's parser what it means to ours. Any other frame is written by
      // the encoder from what was decoded. A frame that only looked like a text delta (its start,
      // its last brace) went out as it came: one that was not JSON failed only at settlement (no
      // record, its hold kept; a billing probe), one with a second "delta" key told the client
      // something else than the meter counted (a raw-TCP probe).
      // Data in several lines is written anew in one (relayed as it came, its second line would
      // reach the client without its `data:`): a template learnt from such a frame would match it.
      const text = held.length === 0 && skim && !frame.multiline ? readText?.(frame) : undefined;
      // A known secret split across text frames (split-secret-guard.ts): the text the client gets
      // of this frame, when it is not the frame's own, is written anew.
      const shown = text === undefined || !guard ? text : guard.text(text);
      const skimmed = text === undefined || shown !== text ? undefined : skim!(frame, text);
      if (skimmed !== undefined) {
        // Its text counts against the answer's bound now; the meter reads it again only if it must estimate.
        o.meter.defer(frame, decodeEvents, text!.length);
        out += skimmed;
      } else {
        let decoded: DecodedFrame = text === undefined ? o.decode(frame) : new TemplateTextFrame(frame.data, text);
        if (guard) decoded = shown !== text ? shownText(decoded, shown!) : text === undefined ? guarded(frame, decoded) : decoded;
        if (decoded.last) vendorEnded = true;
        // Read to the end for its usage (readRest): nothing is held for images, every event is counted.
        if (!readingRest && (held.length > 0 || (o.resolveImages && decoded.events.some((e) => e.type === "image")))) held.push({ frame, decoded, last: decoded.last });
        else emit(frame, decoded, decoded.last);
      }
      // Far more than the answer's limit could make: what came goes out, then an error, and the
      // upstream is read no further (usage-meter.ts, RELAY_CHARS_PER_TOKEN). It is charged at the limit.
      if (o.meter.overrun && !failure) fail({ type: "error", errorType: "upstream", message: "The upstream provider sent far more than the answer's token limit allows; the answer was cut." });
    },
  });

  const drainHeld = async () => {
    while (held.length > 0 && !failure) {
      const next = held.shift()!;
      // Images past the hold are taken out before anything fetches them.
      const decoded = o.meter.imageRoom !== Number.POSITIVE_INFINITY ? withinImages(next.decoded) : next.decoded;
      if (decoded.events.some((e) => e.type === "image")) await o.resolveImages!(decoded.events);
      emit(next.frame, decoded, next.last);
    }
    held.length = 0;
  };

  /** The loop waiting for the pump (see `pump` in pull): let go when the answer ends another way. */
  let handOver: { resolve: (handed: Handed) => void; reject: (err: unknown) => void } | undefined;
  /** The waiting loop, once: whoever takes it resolves or rejects it. */
  const letGo = () => {
    const to = handOver;
    handOver = undefined;
    return to;
  };

  /** The gateway cut the answer (its stop, past the grace): the client got an error frame, and it ends as cancelled. */
  let cutByGateway = false;
  /** The upstream's end was read: the answer finishes (or fails) on its own from here. */
  let ending = false;
  const finish = (outcome: StreamOutcome, reason?: string) => {
    if (done) return;
    done = true;
    stopClock?.();
    if (o.cuts) o.cuts.unwatch(cutNow);
    // Ended by the gateway, not by a failing upstream: billed as any stream cut short (billing-session.ts).
    if (cutByGateway && outcome === "failed") outcome = "cancelled";
    // A cancel while the loop waits for the pump: the loop returns (it sees `done`) instead of
    // waiting for a chunk that will not be read.
    letGo()?.resolve(END);
    // A finished answer leaves its connection to the transport (kept alive); anything else cuts it.
    if (outcome === "completed") o.deadline.clear();
    else o.deadline.abort(new DOMException(reason ?? "stream ended", "AbortError"));
    o.onDone(outcome, reason, chargeable, cutByGateway);
  };

  const fail = (e: StreamEvent & { type: "error" }) => {
    failure = e;
    o.meter.observe(e);
  };

  /**
   * The gateway stops under this answer: what came goes out, then an error frame (an overload,
   * which the SDKs and agent CLIs retry), and the stream ends. The relay loop is woken from its
   * wait for the upstream; a loop waiting for a slow client is left to the connection's close.
   */
  const cutNow = () => {
    // An answer whose end is taken (being settled, or its body's end awaited) finishes as it is;
    // the wait for its body's end (up to END_GRACE_MS, longer than the cut's wait) ends now, so it
    // settles and its last frames go out before the connections close (a raw-TCP probe).
    if (vendorEnded && !done && !failure) {
      endAtOnce = true;
      stopWaitingForEnd?.();
    }
    if (done || failure || ending || vendorEnded) return;
    cutByGateway = true;
    fail({ type: "error", errorType: "overloaded", message: o.cuts?.reason instanceof LedgerLostCut ? LEDGER_CUT : SHUTDOWN_CUT });
    letGo()?.resolve(TAKEN);
    if (pendingRead) reader.cancel().catch(() => {});
  };

  /**
   * The failure's frame, once, after everything that went before it: written before anything is
   * sent once the answer failed. A sink whose failure frame shows usage (the Responses API's
   * `response.failed`) first gets what the failed answer is charged, when it is charged at all.
   */
  let failureWritten = false;
  const writeFailure = async () => {
    if (!failure || failureWritten) return;
    failureWritten = true;
    if (o.sink.usageOnFailure && o.failureUsage && chargeable && o.meter.answered) {
      const usage = await o.failureUsage().catch(() => undefined);
      if (usage) out += o.sink.event(usage);
    }
    out += o.sink.event(failure);
  };

  /** A chunk of the body into the parser (and so into `out`), as its bytes arrive. */
  const feed = (chunk: Uint8Array) => {
    o.deadline.touch();
    parser.feed(chunk);
  };

  /**
   * After a chunk was fed: frames held for their images are inlined, unless `early` (taken before
   * the head went out: their downloads must not hold the head back). True once the answer failed.
   */
  const afterFeed = async (early: boolean): Promise<boolean> => {
    if (held.length > 0 && !early) await drainHeld();
    return failure !== undefined;
  };

  /** One read's result into `out`; true once the answer is over (it ended, or failed). `early`: see afterFeed. */
  const take = async (read: ReadResult, early = false): Promise<boolean> => {
    if (!read.done && vendorEnded) {
      // Body bytes after the vendor's end: whatever they are, the answer is over; the connection
      // is not trusted again (cancelling the body drops it).
      reader.cancel().catch(() => {});
      read = END;
    }
    if (!read.done) {
      feed(read.value);
      return afterFeed(early);
    }
    ending = true;
    parser.end();
    // Text the guard held for a secret that never came is the answer's last text, when the answer
    // finished; an answer cut short fails, and a key's start is not let out before its error.
    const rest = guard && (o.meter.finished && !failure ? guard.flush() : (guard.discard(), ""));
    if (rest) held.push({ frame: HELD_TEXT, decoded: heldText(rest) });
    if (held.length > 0) await drainHeld();
    if (!failure) {
      if (o.meter.finished) {
        const usage = await o.estimateUsage();
        if (usage) out += o.sink.event(usage);
        await o.beforeEnd?.();
        // The client may have left while the settlement was written: nothing more goes out.
        if (!done) {
          const end = o.sink.end();
          const tail = typeof end === "string" ? end : await end;
          if (!done) out += tail;
        }
      } else fail(ENDED_EARLY);
    }
    return true;
  };

  /**
   * After the vendor's end marker only its body's end may come (the chunked terminator, sent
   * with the marker by any sound server): waited for `END_GRACE_MS`, so the connection can be
   * kept, then the body is dropped and the answer ends as if it had come. A failure of the body
   * past that point is its end too: the answer was whole. An upstream that says it is done but
   * holds the body open no longer holds the client until the idle limit.
   */
  const endNow = (): ReadResult | undefined => {
    try {
      return reader.readNow?.();
    } catch {
      return END;
    }
  };
  /** Ends the wait for the body's end at once (the gateway cuts: the answer was whole). */
  let stopWaitingForEnd: (() => void) | undefined;
  /** The gateway cut after the vendor's end marker: its body's end is not waited for. */
  let endAtOnce = false;
  const endOfBody = (): ReadResult | Promise<ReadResult> =>
    endNow() ??
    (endAtOnce ? (reader.cancel().catch(() => {}), END) : undefined) ??
    new Promise<ReadResult>((resolve) => {
      const giveUp = () => {
        clearTimeout(timer);
        stopWaitingForEnd = undefined;
        reader.cancel().catch(() => {});
        resolve(END);
      };
      const timer = setTimeout(giveUp, END_GRACE_MS);
      stopWaitingForEnd = giveUp;
      const settle = (read: ReadResult) => {
        clearTimeout(timer);
        stopWaitingForEnd = undefined;
        resolve(read);
      };
      reader.read().then(settle, () => settle(END));
    });

  /**
   * A read, and what had already arrived behind it: one read holds everything queued, so that is
   * at most the answer's end (an answer's last frames and its end usually come together), and
   * both go out in one write.
   */
  const takeWithNext = async (read: ReadResult, early = false): Promise<boolean> => {
    if ((await take(read, early)) || done) return true;
    return takeBehind(early);
  };
  /** What had already arrived behind a taken read (see takeWithNext). */
  const takeBehind = (early = false): boolean | Promise<boolean> => {
    if (held.length > 0) return false;
    const next = vendorEnded ? endNow() : reader.readNow?.();
    return next ? take(next, early) : false;
  };

  // What already arrived, before the head goes out (see above).
  let over = false;
  /** A failure while taking it: thrown again inside the stream, which turns it into an error frame. */
  let failedEarly: { error: unknown } | undefined;
  /**
   * Everything that arrived, taken before the head goes out (`early`); what had arrived behind a
   * vendor's end is its body's end. Not past frames held for their images: their downloads must
   * not hold the head back, and the end would wait for them.
   */
  const takeArrived = async (): Promise<void> => {
    try {
      while (!over && !done && held.length === 0) {
        const next = vendorEnded ? endNow() : reader.readNow?.();
        if (!next) return;
        over = await take(next, true);
      }
    } catch (error) {
      failedEarly = { error };
    }
  };
  await takeArrived();

  return {
    type: "direct",

    takeArrived,

    /** A read streamAnswer's wait made (readAhead), taken as the first read is. */
    async takeRead(read: ReadResult) {
      try {
        over = await take(read, true);
        if (!over && !done) await takeArrived();
      } catch (error) {
        failedEarly = { error };
      }
    },

    /** That read failed: as a failure in the first read. */
    takeFailure(error: unknown) {
      failedEarly = { error };
    },

    /** That read still under way when the wait ended: the relay loop's (or readRest's) first. */
    adoptRead(read: Promise<ReadResult>) {
      pendingRead = read;
    },

    /**
     * Only the events that open an answer came so far, or nothing the client would be written: the
     * head may wait (see streamAnswer). Thinking a client is not shown, say, is something of the
     * answer but nothing to write; a head alone would tell the client nothing either. Not once
     * OPENING_HOLD_CHARS are waiting to go out: the client's pace bounds them from there.
     */
    opening() {
      return !over && !done && failure === undefined && failedEarly === undefined && held.length === 0 && (!o.meter.answered || out.length === 0) && out.length < OPENING_HOLD_CHARS;
    },

    /** The attempt ends before its head (the gateway's stop): its upstream request is aborted, nothing is settled. */
    letGo(reason: unknown) {
      done = true;
      letGo()?.resolve(END);
      o.deadline.abort(reason);
      reader.cancel().catch(() => {});
    },

    /**
     * The failure found in what had arrived before the head, once: the attempt is then over (its
     * upstream request aborted, `onDone` never told: no frame went out and nothing is settled).
     */
    failedBeforeStart() {
      if (done || !(failure || failedEarly)) return undefined;
      const event = failure ?? o.describeFailure?.(failedEarly!.error)?.event ?? streamFailure(failedEarly!.error, o.deadline.expired !== undefined);
      done = true;
      letGo()?.resolve(END);
      o.deadline.abort(new DOMException(event.message, "AbortError"));
      reader.cancel().catch(() => {});
      return event;
    },

    /**
     * The answer's frames and end, when all of it arrived (and was settled) before the head went
     * out: then it is one body, and a response with a string body costs less than a stream that
     * is written once and closed (~3.5 µs a response on loopback, the direct stream's own
     * machinery). The client sees the same bytes; only the framing is a length, not chunks.
     * Undefined otherwise (still arriving, failed, or images to fetch): the stream it is.
     */
    whole() {
      if (!over || failure || failedEarly || held.length > 0 || done) return undefined;
      const body = out;
      out = "";
      firstWriteDone();
      finish("completed");
      return body;
    },

    async pull(controller) {
      if (!done) o.cuts?.watch(cutNow);
      /**
       * The length of the last text handed to the client's connection: what a wait for the client
       * waits on is at most that (in UTF-16 units: its bytes for ASCII, a third of them at worst).
       * A length, not the text: a stream that waits for its upstream would keep a 64 KiB slice.
       */
      let lastSent = 0;
      /**
       * Writes what is pending. Returns a promise only when the client is slower than the
       * upstream (backpressure); the usual case costs no promise and no microtask. `last`: the
       * stream closes next, and closing sends what is buffered with the body's end in one write
       * (a flush first would cost a second system call per answer).
       */
      const send = (last = false): Promise<unknown> | undefined => {
        if (out.length === 0) return;
        const chunk = out;
        lastSent = chunk.length;
        out = "";
        lastWrite = performance.now();
        firstWriteDone();
        const written = controller.write(chunk);
        if (last) return typeof written !== "number" ? written : undefined;
        const flushed = controller.flush();
        if (typeof written !== "number") return typeof flushed !== "number" ? Promise.all([written, flushed]) : written;
        if (typeof flushed !== "number") return flushed;
      };

      // Keep-alive frames while the upstream is quiet; the deadline watches the upstream itself.
      if (!over) {
        stopClock = o.ticker.every(Math.max(5, o.keepAliveMs / 3), () => {
          // The end is taken (and maybe still draining to a slow client): nothing after it.
          if (over) return;
          const now = performance.now();
          if (now - lastWrite >= o.keepAliveMs - TIMER_EARLY_MS) {
            lastWrite = now;
            controller.write(o.sink.keepAlive());
            controller.flush();
          }
        });
        // The head's wait ran its keepalive_ms with nothing to write (OpenAI's role chunk translated
        // for an Anthropic or Responses client): the keep-alive is the first write, and the head
        // leaves with it now, not at the clock's first tick, a third of keepalive_ms later (a
        // raw-TCP probe: the head after 20 s of silence by default, where keepalive_ms says 15).
        if (out.length === 0 && performance.now() - lastWrite >= o.keepAliveMs - TIMER_EARLY_MS) out = o.sink.keepAlive();
      }

      /** The client took nothing for `clientIdleMs`: the answer was let go, and its connection is cut. */
      let givenUp = false;
      /**
       * The client is slower than the upstream: stop reading the upstream until it catches up
       * (so at most what the socket buffers waits in memory), and give up on a client that takes
       * nothing for `clientIdleMs`. The upstream's silence meanwhile is ours, not its fault.
       */
      const waitForClient = async (pending: Promise<unknown>): Promise<boolean> => {
        o.deadline.pause();
        // Counted while it waits (the write it waits on is at most what it last sent), not before:
        // a client that keeps up holds nothing of its own here.
        o.stalled?.(STALLED_STREAM_BYTES + lastSent);
        let timer: ReturnType<typeof setTimeout> | undefined;
        const gaveUp = new Promise<"idle">((resolve) => (timer = setTimeout(() => resolve("idle"), o.clientIdleMs)));
        const result = await Promise.race([pending.then(() => "sent" as const, () => "sent" as const), gaveUp]);
        clearTimeout(timer);
        o.stalled?.(0);
        o.deadline.resume();
        if (result === "idle" && !done) {
          // An answer that reasons out of sight is read to its end for its usage, as when its client
          // leaves (cancel): a client that kept its connection open and read nothing was charged
          // what had been relayed, 164 tokens of a 60,024-token bill (a hostile-tenant probe, twelfth).
          // Its connection is cut, not closed: a close waits for the client to take what is
          // buffered, which it never does (streaming/paced-body.ts, CUT_CONNECTION).
          givenUp = true;
          if (!vendorEnded && !failure && o.readToEndOnCancel?.()) {
            readRest();
            return false;
          }
          finish("cancelled", "the client stopped reading");
          reader.cancel().catch(() => {});
          return false;
        }
        return true;
      };

      /**
       * Waiting for the upstream without a promise a chunk (`onReadable`): `pump` takes what comes
       * and sends it, in the transport's callback, as long as nothing needs this loop; then it
       * hands over, once: the end (settled here), a failure, frames with images, the vendor's end
       * marker, or a client slower than the upstream. A slow stream then holds nothing between
       * its frames that the last frame made (see ChunkReader.onReadable).
       */
      const hand = (handed: Handed) => letGo()?.resolve(handed);
      const pump = (): void => {
        // The client left: nothing more is read; the loop is let go (it returns, seeing `done`).
        if (done) return hand(END);
        try {
          for (;;) {
            const read = reader.readNow!();
            if (!read) {
              // Everything that arrived is taken: it goes out now, as the loop would send it.
              const backpressure = send();
              if (done) return;
              if (backpressure) return hand({ backpressure });
              return reader.onReadable!(pump);
            }
            if (read.done) return hand(read);
            feed(read.value);
            if (failure !== undefined || held.length > 0 || vendorEnded) return hand(TAKEN);
          }
        } catch (err) {
          letGo()?.reject(err);
        }
      };
      const pumped = () =>
        new Promise<Handed>((resolve, reject) => {
          handOver = { resolve, reject };
          reader.onReadable!(pump);
        });

      try {
        if (failedEarly) throw failedEarly.error;
        for (;;) {
          // What was taken goes out before the next read: at first, at once, with the head.
          if (failure && !failureWritten) {
            await writeFailure();
            if (done) return;
          }
          const backpressure = send(over);
          if (backpressure && !(await waitForClient(backpressure))) throw CUT_CONNECTION;
          if (done) return;
          if (over) break;
          if (held.length > 0) {
            // Frames taken before the head went out wait for their images here.
            await drainHeld();
            over = failure !== undefined;
            continue;
          }
          // A chunk already here is taken at once, without a promise.
          let read = vendorEnded ? await endOfBody() : reader.readNow?.();
          if (!read && reader.onReadable) {
            const handed = await pumped();
            if (done) return; // the client went away while we waited
            if (handed !== TAKEN && "backpressure" in handed) {
              if (!(await waitForClient(handed.backpressure))) throw CUT_CONNECTION;
              continue;
            }
            if (handed === TAKEN) {
              // The pump fed (and sent) chunks; the rest of taking them is done here, as
              // takeWithNext would: frames with images, what came after the vendor's end marker.
              over = (await afterFeed(false)) || done || (await takeBehind());
              if (done) return;
              continue;
            }
            read = handed;
          }
          if (!read) {
            // A read streamAnswer's wait left under way is taken first (adoptRead).
            pendingRead ??= reader.read();
            read = await pendingRead;
            pendingRead = undefined;
          }
          if (done) return; // the client went away while we waited (a read to the end takes this chunk: readRest)
          over = await takeWithNext(read);
          if (done) return;
        }
        o.beforeClose?.();
        controller.close();
        finish(failure ? "failed" : "completed", failure?.message);
      } catch (err) {
        if (givenUp) throw CUT_CONNECTION;
        if (done) return;
        const described = o.describeFailure?.(err);
        // An image that could not be inlined fails the answer uncharged, like any failed attempt.
        // An answer past the transport's cap is charged for what went out, as any stream cut
        // short: uncharged, 97 % of an `n: 47` answer reached its client for nothing (a
        // hostile-tenant probe, 2026-11-30).
        if (described && !described.chargeable) chargeable = false;
        if (!failure) fail(described?.event ?? streamFailure(err, o.deadline.expired !== undefined));
        await writeFailure();
        if (done) return;
        // Before the last write, which waits for the client unbounded: the idle timeout put back
        // gives up a client that reads none of it.
        o.beforeClose?.();
        await send(true)?.catch(() => {});
        controller.close();
        finish("failed", err instanceof Error ? err.message : String(err));
      }
    },

    cancel() {
      if (!done && !vendorEnded && !failure && o.readToEndOnCancel?.()) return readRest();
      finish("cancelled", "client disconnected");
      reader.cancel().catch(() => {});
    },
  };

  /**
   * The client left an answer that reasons out of sight: what the vendor still sends is read for
   * its usage, none of it relayed, until its end, the answer's limit (the meter's overrun) or the
   * deadline; then the answer ends as a cancelled one, charged what the vendor says it made. The
   * relay's own loop stops (it sees `done`), and this one reads alone.
   */
  function readRest(): void {
    done = true;
    readingRest = true;
    stopClock?.();
    letGo()?.resolve(END);
    o.deadline.resume();
    const end = () => {
      done = false;
      out = "";
      finish("cancelled", "client disconnected");
      reader.cancel().catch(() => {});
    };
    const step = (): void => {
      try {
        for (;;) {
          if (vendorEnded || failure || o.meter.overrun) return end();
          const read = reader.readNow ? reader.readNow() : undefined;
          if (!read) {
            if (reader.readNow && reader.onReadable) return reader.onReadable(step);
            void reader.read().then(next, end);
            return;
          }
          if (read.done) return end();
          take(read.value);
        }
      } catch {
        end();
      }
    };
    const take = (chunk: Uint8Array) => {
      feed(chunk);
      // Nothing goes to the client.
      out = "";
    };
    // A chunk a promise brought: a throw here (an oversized frame) ends the answer, never escapes
    // as a rejection nobody handles (which ends the process).
    const next = (r: ReadResult) => {
      try {
        if (r.done) return end();
        take(r.value);
      } catch {
        return end();
      }
      step();
    };
    // A read the relay loop has under way is this loop's first, so the bytes stay in order.
    const waiting = pendingRead;
    if (waiting) void waiting.then(next, end);
    else step();
  }
}

function streamFailure(err: unknown, timedOut: boolean): StreamEvent & { type: "error" } {
  if (err instanceof ResponseTooLargeError) return { type: "error", errorType: "upstream", message: "The upstream provider sent an answer larger than the gateway accepts." };
  if (timedOut) return { type: "error", errorType: "timeout", message: "The upstream provider took too long; the answer was cut off." };
  if (err instanceof SseParseError) return { type: "error", errorType: "upstream", message: "The upstream provider sent a frame larger than the gateway accepts." };
  // Broken HTTP framing mid-body is malformed data too, not a lost connection (a raw-TCP probe).
  if (err instanceof UpstreamProtocolError || err instanceof ResponseFramingError) return { type: "error", errorType: "upstream", message: "The upstream provider sent malformed data." };
  return { type: "error", errorType: "upstream", message: "The connection to the upstream provider was lost." };
}
