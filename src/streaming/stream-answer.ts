import type { StreamEvent } from "./events.ts";
import type { ClientSink } from "./client-sink.ts";
import { createSseParser, SseParseError } from "./sse-parser.ts";
import { UpstreamProtocolError, type DecodedFrame } from "../providers/provider.ts";
import type { SseEvent } from "./sse-parser.ts";
import type { UsageMeter } from "../billing/usage-meter.ts";
import { ImageFetchError, ImageTooLargeError } from "../pipeline/inline-images.ts";
import { everyTick } from "./ticker.ts";
import { ResponseTooLargeError, type ChunkReader } from "../transport/transport.ts";

export type StreamOutcome =
  /** The upstream finished its answer and the client got every frame. */
  | "completed"
  /** The upstream failed or broke its format after the first byte; the client got an error frame. */
  | "failed"
  /** The client went away; the upstream request was aborted. */
  | "cancelled";

export interface StreamAnswerOptions {
  /** The upstream body: a stream's reader, or the upstream client's cheaper one. */
  upstream: ChunkReader;
  decode: (frame: SseEvent) => DecodedFrame;
  sink: ClientSink;
  meter: UsageMeter;
  /** Aborts the upstream request (its fetch, and with it the socket). */
  abortUpstream: () => void;
  /** Usage to report when the upstream reported none (called once, at a normal end). */
  estimateUsage: () => Promise<StreamEvent | undefined>;
  keepAliveMs: number;
  /** Longest silence accepted from the upstream before the answer is given up. */
  idleMs: number;
  /** Longest whole answer. */
  totalMs: number;
  maxFrameBytes: number;
  /** Inlines image events (fetch, size cap); throws to fail the answer. Only called for frames with images. */
  resolveImages?: (events: StreamEvent[]) => Promise<void>;
  /** Called exactly once, whatever ends the stream. `chargeable` is false when the failure is one the client must not pay for. */
  onDone: (outcome: StreamOutcome, reason?: string, chargeable?: boolean) => void;
}

/**
 * The one streaming pipeline: upstream bytes → SSE parser → provider decoder → usage meter →
 * client sink. The client side is one of Bun's direct streams: a single loop reads the upstream
 * and writes frames straight to the socket, waiting whenever the client is slower than the
 * upstream (write() returns a promise then), so an upstream is read only as fast as the client
 * takes frames. Once the first byte is out the status is fixed, so every failure becomes a frame.
 */
export function streamAnswer(o: StreamAnswerOptions): ReadableStream<Uint8Array> {
  const reader = o.upstream;
  let out = "";
  let failure: (StreamEvent & { type: "error" }) | undefined;
  let done = false;
  let lastWrite = performance.now();
  let lastRead = lastWrite;
  const startedAt = lastWrite;
  let idleExpired = false;
  let stopClock: (() => void) | undefined;

  let chargeable = true;
  // Frames with images wait here for inlining (a fetch); all others pass straight through.
  const held: { frame: SseEvent; parsed: unknown; events: StreamEvent[] }[] = [];

  const emit = (frame: SseEvent, parsed: unknown, events: StreamEvent[]) => {
    for (const e of events) {
      o.meter.observe(e);
      if (e.type === "error") failure ??= e;
    }
    // An upstream error frame is replaced by our own: vendor error text may carry internals.
    out += failure ? o.sink.event(failure) : o.sink.frame(frame, parsed, events);
  };

  const parser = createSseParser({
    maxEventBytes: o.maxFrameBytes,
    onEvent(frame) {
      if (failure) return;
      const skimmed = held.length === 0 ? o.sink.skim?.(frame) : undefined;
      if (skimmed !== undefined) {
        o.meter.defer(() => o.decode(frame).events);
        out += skimmed;
        return;
      }
      const { parsed, events } = o.decode(frame);
      if (held.length > 0 || (o.resolveImages && events.some((e) => e.type === "image"))) held.push({ frame, parsed, events });
      else emit(frame, parsed, events);
    },
  });

  const drainHeld = async () => {
    while (held.length > 0 && !failure) {
      const next = held.shift()!;
      if (next.events.some((e) => e.type === "image")) await o.resolveImages!(next.events);
      emit(next.frame, next.parsed, next.events);
    }
    held.length = 0;
  };

  const finish = (outcome: StreamOutcome, reason?: string) => {
    if (done) return;
    done = true;
    stopClock?.();
    if (outcome !== "completed") o.abortUpstream();
    o.onDone(outcome, reason, chargeable);
  };

  const fail = (e: StreamEvent & { type: "error" }) => {
    failure = e;
    o.meter.observe(e);
    out += o.sink.event(e);
  };

  return new ReadableStream({
    type: "direct",
    async pull(controller) {
      /**
       * Writes what is pending. Returns a promise only when the client is slower than the
       * upstream (backpressure); the usual case costs no promise and no microtask.
       */
      const send = (): Promise<unknown> | undefined => {
        if (out.length === 0) return;
        const chunk = out;
        out = "";
        lastWrite = performance.now();
        const written = controller.write(chunk);
        const flushed = controller.flush();
        if (typeof written !== "number") return typeof flushed !== "number" ? Promise.all([written, flushed]) : written;
        if (typeof flushed !== "number") return flushed;
      };

      stopClock = everyTick(Math.max(5, Math.min(o.keepAliveMs, o.idleMs) / 3), () => {
        const now = performance.now();
        if (now - lastRead >= o.idleMs || now - startedAt >= o.totalMs) {
          idleExpired = true;
          o.abortUpstream();
          return;
        }
        if (now - lastWrite >= o.keepAliveMs) {
          lastWrite = now;
          controller.write(o.sink.keepAlive());
          controller.flush();
        }
      });

      try {
        for (;;) {
          const { value, done: eof } = await reader.read();
          if (done) return; // the client went away while we waited
          if (eof) {
            parser.end();
            if (held.length > 0) await drainHeld();
            if (!failure) {
              if (o.meter.finished) {
                const usage = await o.estimateUsage();
                if (usage) out += o.sink.event(usage);
                out += o.sink.end();
              } else fail({ type: "error", errorType: "upstream", message: "The upstream provider ended the answer early." });
            }
          } else {
            lastRead = performance.now();
            parser.feed(value);
            if (held.length > 0) await drainHeld();
          }
          const backpressure = send();
          if (backpressure) await backpressure;
          if (done) return;
          if (eof || failure) {
            controller.close();
            finish(failure ? "failed" : "completed", failure?.message);
            return;
          }
        }
      } catch (err) {
        if (done) return;
        // Answers past a cap are not charged: the client cannot use what was cut off.
        if (err instanceof ImageTooLargeError || err instanceof ResponseTooLargeError) chargeable = false;
        if (!failure) fail(streamFailure(err, idleExpired));
        await send()?.catch(() => {});
        controller.close();
        finish("failed", err instanceof Error ? err.message : String(err));
      }
    },

    cancel() {
      finish("cancelled", "client disconnected");
      reader.cancel().catch(() => {});
    },
  }) as ReadableStream<Uint8Array>;
}

function streamFailure(err: unknown, idle: boolean): StreamEvent & { type: "error" } {
  if (err instanceof ImageTooLargeError) return { type: "error", errorType: "upstream", message: "The upstream provider made an image larger than the gateway accepts." };
  if (err instanceof ResponseTooLargeError) return { type: "error", errorType: "upstream", message: "The upstream provider sent an answer larger than the gateway accepts." };
  if (err instanceof ImageFetchError) return { type: "error", errorType: "upstream", message: "The upstream provider sent an image the gateway could not use." };
  if (idle) return { type: "error", errorType: "timeout", message: "The upstream provider took too long; the answer was cut off." };
  if (err instanceof SseParseError) return { type: "error", errorType: "upstream", message: "The upstream provider sent a frame larger than the gateway accepts." };
  if (err instanceof UpstreamProtocolError) return { type: "error", errorType: "upstream", message: "The upstream provider sent malformed data." };
  return { type: "error", errorType: "upstream", message: "The connection to the upstream provider was lost." };
}
