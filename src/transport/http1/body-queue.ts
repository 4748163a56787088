import type { ChunkReader, ReadResult } from "../transport.ts";

/** Past this much unread body the socket is paused until the reader catches up. */
const HIGH_WATER_BYTES = 64 * 1024;

/**
 * Who fills a body queue: told when the reader has taken what was queued (a paused socket may
 * read again) and when the reader cancelled. Methods of the exchange, not closures of its own.
 */
export interface BodyQueueOwner {
  bodyTaken(): void;
  bodyCancelled(): void;
}

/**
 * Chunks between the socket and one reader. Either `read()` is used directly (the stream
 * pipeline, through `fastReader`) or through `stream()` (everything else: `text()`, `json()`),
 * never both.
 */
export class BodyQueue implements ChunkReader {
  claimed = false;
  private chunks: Uint8Array[] = [];
  private waiting: { resolve: (r: ReadResult) => void; reject: (e: unknown) => void } | null = null;
  /** Told once when a chunk or the end arrives (see `onReadable`). */
  private ready: (() => void) | null = null;
  private ended = false;
  private failure: unknown = undefined;
  private queuedBytes = 0;

  /** `owner` (the exchange) is told when the reader took what was queued, and when it cancelled. */
  constructor(private readonly owner: BodyQueueOwner) {}

  get full(): boolean {
    return this.queuedBytes >= HIGH_WATER_BYTES;
  }

  /**
   * One socket read's worth of body: handed over as one piece, so a burst costs one pass downstream.
   * `ending`: this read also ended the body and `end()` comes next, in the same callback; a reader
   * waiting with `onReadable` is told once, then, and takes the last chunk with the end, as a
   * promise's reader would (the answer's last frames leave with its end, after its settlement).
   */
  push(chunks: Uint8Array[], ending = false): void {
    const waiting = this.waiting;
    if (waiting) {
      this.waiting = null;
      waiting.resolve({ done: false, value: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks) });
    } else {
      for (const chunk of chunks) {
        this.chunks.push(chunk);
        this.queuedBytes += chunk.byteLength;
      }
      if (!ending) this.tellReady();
    }
  }

  /** A reader waiting with `onReadable` takes what came, here, in the socket's callback. */
  private tellReady(): void {
    const ready = this.ready;
    if (!ready) return;
    this.ready = null;
    ready();
  }

  end(error?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.failure = error;
    this.tellReady();
    const waiting = this.waiting;
    this.waiting = null;
    if (!waiting) return;
    if (error !== undefined) waiting.reject(error);
    else waiting.resolve({ done: true, value: undefined });
  }

  readNow(): ReadResult | undefined {
    const queued = this.chunks;
    if (queued.length > 0) {
      const value = queued.length === 1 ? queued[0]! : Buffer.concat(queued);
      // Emptied, not replaced: a new array a read would live until the next chunk, long enough
      // to be promoted by a collection, and the chunk stored in it then with it.
      queued.length = 0;
      this.queuedBytes = 0;
      this.owner.bodyTaken();
      return { done: false, value };
    }
    if (!this.ended) return undefined;
    if (this.failure !== undefined) throw this.failure;
    return { done: true, value: undefined };
  }

  read(): Promise<ReadResult> {
    if (this.chunks.length > 0 || this.ended) {
      try {
        return Promise.resolve(this.readNow()!);
      } catch (err) {
        return Promise.reject(err);
      }
    }
    this.owner.bodyTaken();
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
    });
  }

  onReadable(ready: () => void): void {
    if (this.chunks.length > 0 || this.ended) return ready();
    this.owner.bodyTaken();
    this.ready = ready;
  }

  cancel(): Promise<void> {
    this.ready = null;
    this.chunks = [];
    this.queuedBytes = 0;
    if (!this.ended) {
      this.ended = true;
      this.owner.bodyCancelled();
    }
    return Promise.resolve();
  }

  stream(): ReadableStream<Uint8Array> {
    return new ReadableStream<Uint8Array>({
      pull: async (controller) => {
        this.claimed = true;
        const { done, value } = await this.read();
        if (done) controller.close();
        else controller.enqueue(value);
      },
      cancel: () => this.cancel(),
    }, { highWaterMark: 0 });
  }
}

const readers = new WeakMap<Response, BodyQueue>();

/** Registers the queue under its Response, for `fastReader`. */
export function offerFastReader(response: Response, queue: BodyQueue): void {
  readers.set(response, queue);
}

/**
 * The body of a streamed answer from our HTTP/1.1 client without the ReadableStream machinery,
 * which costs about a microsecond per chunk; undefined for other responses or once the body is in use.
 */
export function fastReader(response: Response): ChunkReader | undefined {
  const queue = readers.get(response);
  if (!queue || response.bodyUsed || queue.claimed) return undefined;
  queue.claimed = true;
  return queue;
}

const wholes = new WeakMap<Response, Uint8Array>();

/** Registers the buffer a whole answer was read into, for `wholeBody`. */
export function offerWholeBody(response: Response, bytes: Uint8Array): void {
  wholes.set(response, bytes);
}

/**
 * The body of an answer our HTTP/1.1 client read whole (a non-stream answer with a
 * Content-Length), as the one buffer it was read into: reading it through the Response's
 * stream costs a reader, a stream start and a drain for bytes already in memory. Undefined for
 * other responses or once the body is in use; claiming it leaves the Response unread.
 */
export function wholeBody(response: Response): Uint8Array | undefined {
  const bytes = wholes.get(response);
  if (!bytes || response.bodyUsed) return undefined;
  wholes.delete(response);
  return bytes;
}

/**
 * A reader over an answer our HTTP/1.1 client read whole (a streamed answer sent with a
 * Content-Length: a buffering proxy, a short answer): all of it is there, so `readNow()` gives it
 * at once, and the stream stage sees an error in it before anything goes to the client (retried
 * or moved to another key or model, as a chunked one is). Undefined for other responses.
 */
export function wholeReader(response: Response): ChunkReader | undefined {
  let bytes = wholeBody(response);
  if (!bytes) return undefined;
  const readNow = (): ReadResult => {
    const value = bytes;
    bytes = undefined;
    return value && value.byteLength > 0 ? { done: false, value } : { done: true, value: undefined };
  };
  return {
    readNow,
    read: () => Promise.resolve(readNow()),
    // Never waited on (readNow always answers); called anyway, it is ready.
    onReadable: (ready) => queueMicrotask(ready),
    cancel: () => {
      bytes = undefined;
      return Promise.resolve();
    },
  };
}
