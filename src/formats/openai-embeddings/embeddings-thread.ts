import type { Scrubber } from "../../log/scrub.ts";
import { workerUrl } from "../../worker-url.ts";
import type { WholeAnswerReader, WholeAnswerSink } from "../common/whole-answer.ts";
import { embeddingsEvents, faultMessage, inputCountOf, type EmbeddingsFault } from "./check-embeddings.ts";
import { WrittenEmbeddings, type EmbeddingEncoding } from "./encode-embeddings.ts";

/**
 * Large embeddings answers, parsed, checked and written on a thread of their own. 2,048 inputs at
 * 1,400 dimensions make a ~60 MB float answer; on the request thread its `JSON.parse`, the check
 * of every number and the printing of them again for the client took ~1.4 s of CPU in stalls of
 * up to ~0.6 s, and every other tenant's request on the process waited (a hostile-tenant probe:
 * another tenant's p99 from 10.8 ms to 1 s, for 0.04 credits). Past `thresholdBytes` the answer's
 * bytes go to the thread as they arrive (moved, not copied, a socket read at a time), and the
 * request thread gets the client's JSON back as one string that it hands to the response as is.
 *
 * Below the threshold nothing changes: a small answer costs less to parse where it is than to send
 * anywhere. One thread by default: a second would contend with the request thread for the cores
 * (the tokenizer has a thread too), and large answers then wait for one another, not everyone
 * for them. Threads start with the first large answer, and an idle thread does not keep the
 * process alive. When no thread can start, answers are read on the request thread, as before (a
 * thread that dies before its module loaded is taken to mean that: the answer it held is the
 * one lost); when one dies later, its answers in flight are unreadable (502, uncharged, the next
 * model tried) and the next answer starts another.
 */
const WORKER_URL = workerUrl("formats/openai-embeddings/embeddings-worker.ts");

/** Answers up to this size stay on the request thread: ~20 ms of parsing and writing at most (bench machine). */
export const EMBEDDINGS_THREAD_BYTES = 1024 * 1024;

/*
 * The messages both ways are flat objects of strings and numbers: Bun sends those by a fast path
 * (a 60 MB string in ~5 ms), while one holding an array or object beside the text is serialised
 * member by member (~0.6 s for the same string, measured).
 */

/** Request thread → embeddings thread. */
export type EmbeddingsCommand =
  | { type: "bytes"; id: number; bytes: ArrayBuffer }
  /** `known`: the configured vendor keys' forms, one per line, replaced in the answer before it is read (as small answers are). */
  | { type: "end"; id: number; expected: number | undefined; encoding: EmbeddingEncoding; model: string; known: string }
  | { type: "drop"; id: number }
  /** `text` with [start, end) replaced by `usage`. */
  | { type: "splice"; id: number; text: string; start: number; end: number; usage: string };

/** Embeddings thread → request thread. */
export type EmbeddingsReply =
  /** The client's JSON; its usage (the upstream's count, or 0 when it reported none usable) is [start, end). */
  | { type: "written"; id: number; text: string; reported: number | undefined; start: number; end: number }
  | ({ type: "fault"; id: number } & EmbeddingsFault)
  | { type: "failed"; id: number; name: string; message: string }
  | { type: "spliced"; id: number; text: string }
  /** Sent once, when the thread's module has loaded: a thread that dies before it could not start. */
  | { type: "ready"; id: 0 };

export interface EmbeddingsThreadOptions {
  /** Answers larger than this are read on the thread (default EMBEDDINGS_THREAD_BYTES; Infinity: never). */
  thresholdBytes?: number;
  /** Threads at most (default 1); an answer goes to the one with the fewest in hand. */
  threads?: number;
  /** Told when a thread fails or could not start (answers are then read on the request thread). */
  onFailure?: (message: string) => void;
  /** The thread's entry point (tests name one that is not there). */
  url?: URL;
}

export interface EmbeddingsThread {
  readonly thresholdBytes: number;
  /** Answers the threads have read (written or refused), for tests and the curious. */
  readonly answersRead: number;
  /** Answers (and usage rewrites) given to the threads and not yet back. */
  readonly working: number;
  /** The reader an embeddings request's format hands the attempt, for the client's encoding. */
  reader(encoding: EmbeddingEncoding): WholeAnswerReader;
  /** Ends the threads; answers in flight are unreadable. */
  stop(): void;
}

interface Lane {
  worker: Worker;
  /** Answers and splices given to this thread and not yet answered or dropped. */
  busy: number;
  waiting: Map<number, (reply: EmbeddingsReply | Error) => void>;
  ready: boolean;
  dead: boolean;
}

/**
 * Moves a piece of an answer to the thread. Bun hands each socket read its own buffer
 * (transport/http1/response-parser.ts), so a piece that spans all of its buffer is the only view
 * of it and is moved as it is: copying 60 MB in pieces cost the request thread 120–170 ms on the
 * bench machine, moving it 5. Any other view is copied first (never moved from under its
 * neighbours), as is a buffer that cannot be moved.
 */
function send(worker: Worker, id: number, bytes: Uint8Array): void {
  const buffer = bytes.buffer;
  if (buffer instanceof ArrayBuffer && bytes.byteOffset === 0 && bytes.byteLength === buffer.byteLength) {
    try {
      worker.postMessage({ type: "bytes", id, bytes: buffer } satisfies EmbeddingsCommand, [buffer]);
      return;
    } catch {
      // Not movable: copied below.
    }
  }
  const copy = buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;
  worker.postMessage({ type: "bytes", id, bytes: copy } satisfies EmbeddingsCommand, [copy]);
}

export function createEmbeddingsThread(o: EmbeddingsThreadOptions = {}): EmbeddingsThread {
  const thresholdBytes = o.thresholdBytes ?? EMBEDDINGS_THREAD_BYTES;
  const most = Math.max(1, o.threads ?? 1);
  const lanes: Lane[] = [];
  let nextId = 1;
  let answersRead = 0;
  /** A thread could not start (its entry point missing from a build): none is tried again. */
  let unavailable = false;
  let stopped = false;

  const retire = (lane: Lane, why: string) => {
    if (lane.dead) return;
    lane.dead = true;
    lanes.splice(lanes.indexOf(lane), 1);
    lane.worker.terminate();
    if (!lane.ready) unavailable = true;
    for (const settle of lane.waiting.values()) settle(new Error(why));
    lane.waiting.clear();
    if (!stopped) o.onFailure?.(why);
  };

  const start = (): Lane | undefined => {
    if (unavailable || stopped) return undefined;
    let worker: Worker;
    try {
      worker = new Worker(o.url ?? WORKER_URL);
    } catch (err) {
      unavailable = true;
      o.onFailure?.(`the embeddings thread could not start: ${String(err)}`);
      return undefined;
    }
    const lane: Lane = { worker, busy: 0, waiting: new Map(), ready: false, dead: false };
    // An idle thread must not keep the process (or a test run) alive; `take` refs it while busy.
    worker.unref();
    worker.onmessage = (event: MessageEvent<EmbeddingsReply>) => {
      if (event.data.type === "ready") {
        lane.ready = true;
        return;
      }
      const settle = lane.waiting.get(event.data.id);
      if (!settle) return;
      lane.waiting.delete(event.data.id);
      settle(event.data);
    };
    worker.onerror = (event) => retire(lane, `the embeddings thread failed: ${event.message}`);
    worker.addEventListener("close", () => retire(lane, "the embeddings thread exited"));
    lanes.push(lane);
    return lane;
  };

  /** The thread with the fewest answers in hand; another is started while all are busy and there is room. */
  const pick = (): Lane | undefined => {
    let best: Lane | undefined;
    for (const lane of lanes) if (!best || lane.busy < best.busy) best = lane;
    if (best && (best.busy === 0 || lanes.length >= most)) return best;
    return start() ?? best;
  };

  const take = (lane: Lane) => {
    if (lane.busy++ === 0) lane.worker.ref();
  };
  const release = (lane: Lane) => {
    if (--lane.busy === 0 && !lane.dead) lane.worker.unref();
  };

  /** Sends a command that is answered, and waits for the answer. */
  const ask = (lane: Lane, command: EmbeddingsCommand & { type: "end" | "splice" }): Promise<EmbeddingsReply> =>
    new Promise((resolve, reject) => {
      if (lane.dead) return reject(new Error("the embeddings thread exited"));
      lane.waiting.set(command.id, (reply) => (reply instanceof Error ? reject(reply) : resolve(reply)));
      lane.worker.postMessage(command);
    });

  const splice = async (text: string, [start, end]: readonly [number, number], usage: string): Promise<string> => {
    // Without a thread (or if it fails meanwhile) the one copy is made here: the answer was
    // settled already, and an upstream without a usable count is rare.
    const here = () => text.slice(0, start) + usage + text.slice(end);
    const lane = pick();
    if (!lane) return here();
    take(lane);
    try {
      const reply = await ask(lane, { type: "splice", id: nextId++, text, start, end, usage });
      return reply.type === "spliced" ? reply.text : here();
    } catch {
      return here();
    } finally {
      release(lane);
    }
  };

  const open = (encoding: EmbeddingEncoding, sent: unknown, model: string, scrub: Scrubber): WholeAnswerSink | undefined => {
    const lane = pick();
    if (!lane) return undefined;
    const id = nextId++;
    take(lane);
    let open = true;
    const close = () => {
      if (!open) return false;
      open = false;
      release(lane);
      return true;
    };
    return {
      push(bytes) {
        if (!open || lane.dead) return;
        send(lane.worker, id, bytes);
      },
      async finish() {
        if (!open) throw new Error("the embeddings answer was already finished or dropped");
        try {
          const reply = await ask(lane, { type: "end", id, expected: inputCountOf(sent), encoding, model, known: scrub.secrets().join("\n") });
          answersRead++;
          if (reply.type === "fault") throw new Error(faultMessage(reply, scrub));
          if (reply.type === "failed") throw Object.assign(new Error(reply.message), { name: reply.name });
          if (reply.type !== "written") throw new Error(`the embeddings thread answered ${reply.type} to an answer`);
          return { json: new WrittenEmbeddings(model, reply.reported, reply.text, [reply.start, reply.end], splice), events: embeddingsEvents(reply.reported) };
        } finally {
          close();
        }
      },
      drop() {
        if (close() && !lane.dead) lane.worker.postMessage({ type: "drop", id } satisfies EmbeddingsCommand);
      },
    };
  };

  return {
    thresholdBytes,
    get answersRead() {
      return answersRead;
    },
    get working() {
      let n = 0;
      for (const lane of lanes) n += lane.busy;
      return n;
    },
    reader: (encoding) => ({ thresholdBytes, open: (sent, model, scrub) => open(encoding, sent, model, scrub) }),
    stop() {
      stopped = true;
      for (const lane of [...lanes]) retire(lane, "the embeddings thread was stopped");
    },
  };
}
