/**
 * The Transport port: how the pipeline reaches an upstream. It is `fetch`'s call signature, so
 * the global `fetch` is one implementation and our HTTP/1.1 client (http1/client.ts) another;
 * the pipeline cannot tell them apart except through the optional fast reader below.
 *
 * Every implementation bounds what it reads: an answer larger than its cap (counted after
 * decompression) fails with `ResponseTooLargeError`, from the call itself or from the body's reads.
 */
export type Transport = (url: string, init: RequestInit) => Promise<Response>;

/**
 * One header of a transport's answer. Our HTTP/1.1 client's answers build their `Headers` only
 * when asked (http1/upstream-response.ts) and answer a single name from the fields as sent;
 * any other Response is asked the usual way. Names are matched case-insensitively, as `Headers.get`.
 */
export function responseHeader(res: Response, name: string): string | null {
  const own = res as Response & { header?(name: string): string | null };
  return own.header ? own.header(name) : res.headers.get(name);
}

/**
 * What a transport may tell, and ask of, the gateway's deadline for an attempt
 * (gateway/deadline.ts). It comes in the request's init under this key (`attemptInit`), and on
 * the deadline's AbortSignal once one is made; `fetch` never looks for it.
 * - `answerProgress`: a transport that reads a whole answer before handing it over (our HTTP/1.1
 *   client, for a body with a Content-Length) says that the head came (`true`) and that body
 *   bytes keep coming (`false`), so the silence between bytes is timed as it is for a stream.
 * - Abort listeners kept by the deadline itself: adding and removing an "abort" event listener
 *   costs ~0.6 µs, and a transport does it for every request; this is a push and a splice. They
 *   run once the attempt has aborted (its `reason` set), as event listeners do; one added after
 *   that never runs, so callers check `aborted` themselves.
 * - `aborted` and `reason`, as its signal would say: a transport that finds the hooks in the init
 *   needs no AbortSignal at all, and the deadline makes none (~0.5 µs an attempt) unless asked.
 */
export const ATTEMPT_HOOKS = Symbol.for("switchyard.attempt-hooks");
export interface AttemptHooks {
  readonly aborted: boolean;
  readonly reason: unknown;
  readonly signal: AbortSignal;
  answerProgress(head: boolean): void;
  /** The request's last byte was written (the upstream has it all); told once, by transports that know. */
  requestSent?(): void;
  /**
   * The most bytes (after decoding) this answer may be, below the transport's own cap: a whole
   * answer larger than its request could be given (a gzip bomb of 60 MiB against `max_tokens: 50`)
   * fails as too large where it passes the bound, instead of being read, parsed and relayed whole
   * (a raw-TCP probe: 20 at once took the gateway to 4.6 GB and stalled it for seconds).
   */
  readonly maxAnswerBytes?: number;
  addAbortListener(listener: AbortListener): void;
  removeAbortListener(listener: AbortListener): void;
}

/** Told once when an attempt aborts: a function, or an object whose handleEvent() is called (as an EventListener object). */
export type AbortListener = (() => void) | { handleEvent(): void };

/** The size cap of one answer: the transport's own, or the attempt's bound where it is lower (AttemptHooks.maxAnswerBytes). */
export function answerCap(hooks: AttemptHooks | undefined, maxBytes: number): number {
  const bound = hooks?.maxAnswerBytes;
  return bound !== undefined && bound < maxBytes ? bound : maxBytes;
}

export function attemptHooksOf(signal: AbortSignal | null | undefined): AttemptHooks | undefined {
  return signal ? (signal as AbortSignal & { [ATTEMPT_HOOKS]?: AttemptHooks })[ATTEMPT_HOOKS] : undefined;
}

/**
 * A request's init for one attempt: our transport finds the deadline's hooks under ATTEMPT_HOOKS
 * and reads no `signal`; any other transport (`fetch`, a test's) reads `signal`, and the
 * deadline's AbortSignal is made then. A wrapper that copies the init copies the signal (the
 * getter runs); one that sets a signal of its own over it is obeyed (see `attemptHooksOfInit`).
 */
export function attemptInit(hooks: AttemptHooks, init: { method: string; headers: Record<string, string>; body: string }): RequestInit {
  const out = { method: init.method, headers: init.headers, body: init.body, [ATTEMPT_HOOKS]: hooks };
  return Object.defineProperty(out, "signal", SIGNAL_OF_HOOKS) as RequestInit;
}

/** One getter for every attempt's init: the hooks' signal, made when read. */
const SIGNAL_OF_HOOKS: PropertyDescriptor = {
  get(this: { [ATTEMPT_HOOKS]: AttemptHooks }) {
    return this[ATTEMPT_HOOKS].signal;
  },
  enumerable: true,
  configurable: true,
};

/**
 * The deadline's hooks a request's init carries (see `attemptInit`), while its `signal` is still
 * the hooks' own getter: an init whose signal was set over it (a wrapper's `{ ...init, signal }`)
 * gets no hooks here, and its signal is obeyed as any signal is.
 */
export function attemptHooksOfInit(init: RequestInit): AttemptHooks | undefined {
  const hooks = (init as RequestInit & { [ATTEMPT_HOOKS]?: AttemptHooks })[ATTEMPT_HOOKS];
  if (!hooks) return undefined;
  return Object.getOwnPropertyDescriptor(init, "signal")?.get === SIGNAL_OF_HOOKS.get ? hooks : undefined;
}

export type ReadResult = { done: false; value: Uint8Array } | { done: true; value: undefined };

/** What the stream pipeline needs of a body: the subset of a ReadableStream reader it uses. */
export interface ChunkReader {
  read(): Promise<ReadResult>;
  /**
   * What `read()` would give at once, without a promise: a chunk already received, the end, or
   * the failure (thrown); undefined when the next chunk has not arrived yet. A stream whose first
   * bytes came with the answer's head is written in the same turn as that head this way (one
   * socket write for both: Bun sends a direct stream's head on its own when the first write
   * comes after an await), and a chunk already queued costs no promise.
   */
  readNow?(): ReadResult | undefined;
  /**
   * Calls `ready` once, from the transport's own callback, as soon as `readNow()` has something
   * again (a chunk, the end or the failure). Only after `readNow()` gave undefined. A stream that
   * waits this way holds no promise between its chunks: a promise per wait lived from one chunk to
   * the next, so every collection in between moved it to the old generation, and with it the
   * chunk it was resolved with (~770 bytes a chunk of a slow stream's memory until a full collection).
   */
  onReadable?(ready: () => void): void;
  cancel(reason?: unknown): Promise<void>;
}

/**
 * The upstream's answer passed the transport's size cap; nothing more of it is read. `status`: the
 * answer's status, when its head said its length was past the cap (the call itself fails then).
 */
export class ResponseTooLargeError extends Error {
  constructor(readonly limit: number, readonly status?: number) {
    super(`the upstream answer is larger than ${limit} bytes`);
    this.name = "ResponseTooLargeError";
  }
}

/**
 * A body stream that fails with `ResponseTooLargeError` once more than `limit` bytes went through,
 * and cancels its source then, so the connection under it is dropped rather than read to the end.
 * `failure` gives what a failed read of the source is passed on as (decode-body.ts names a decoder's).
 */
export function cappedStream(source: ReadableStream<Uint8Array>, limit: number, failure?: (err: unknown) => unknown): ReadableStream<Uint8Array> {
  const reader = source.getReader();
  let total = 0;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const { done, value } = await (failure ? reader.read().catch((err: unknown) => Promise.reject(failure(err))) : reader.read());
      if (done) return controller.close();
      total += value.byteLength;
      if (total > limit) {
        reader.cancel().catch(() => {});
        return controller.error(new ResponseTooLargeError(limit));
      }
      controller.enqueue(value);
    },
    cancel: (reason) => reader.cancel(reason),
  }, { highWaterMark: 0 });
}
