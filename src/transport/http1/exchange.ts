import { BodyQueue, offerFastReader, offerWholeBody, type BodyQueueOwner } from "./body-queue.ts";
import { contentCoding, decodedBody, decodedFields } from "./decode-body.ts";
import type { Connection, ConnectionOwner, Pool } from "./pool.ts";
import { RequestWriter } from "./request-writer.ts";
import { fieldValue, ResponseParser, type ResponseHead, type ResponseSink } from "./response-parser.ts";
import { UpstreamResponse } from "./upstream-response.ts";
import { attemptHooksOf, type AttemptHooks } from "../transport.ts";

/** The connection failed; `replayable` when no byte of an answer had arrived, so the request may go again. */
export class UpstreamConnectionError extends Error {
  constructor(
    message: string,
    readonly replayable: boolean,
    /** Part of the answer had come when the connection ended: the upstream was reached, its answer is unreadable. */
    readonly answered = false,
  ) {
    super(message);
    this.name = "UpstreamConnectionError";
  }
}

/**
 * A request longer than this may be partly unread when its answer comes (the kernel's buffers took
 * it, the upstream did not): its connection is not kept after a refusal (see `complete`).
 */
const UNREAD_RISK_CHARS = 64 * 1024;

/** Answers with a Content-Length up to this size are handed over whole: one Response, no stream. */
const BUFFER_WHOLE_BYTES = 8 * 1024 * 1024;

export interface ExchangeOptions {
  method: string;
  /** The attempt's deadline, found in the request's init (transport.ts, `attemptInit`): no AbortSignal then. */
  hooks: AttemptHooks | undefined;
  /** Any other signal the request came with. */
  signal: AbortSignal | undefined;
  /** The answer's size cap, after decoding. */
  maxBytes: number;
  /** Where the write waits before it goes out, if anywhere (see client.ts). */
  hold: ((write: () => void) => void) | null;
  /** The connection carried an earlier request (pooled): a 408 then is the keep-alive race (see `head`). */
  reused?: boolean;
}

/**
 * One request and its answer on one connection. The connection goes back to the pool only when
 * the answer was whole, its framing left nothing in doubt and the request was sent whole;
 * anything else destroys it. Every failure reaches the caller once: the call rejects, or the
 * body's reads fail once the Response was handed over.
 */
export function exchange(pool: Pool, conn: Connection, message: string, o: ExchangeOptions): Promise<Response> {
  return new Promise<Response>((resolve, reject) => new Exchange(pool, conn, message, o, resolve, reject));
}

class Exchange implements ConnectionOwner, ResponseSink, BodyQueueOwner {
  private readonly writer: RequestWriter;
  private readonly parser: ResponseParser;
  private settled = false;
  /** The exchange is over: the connection was released or destroyed. */
  private over = false;
  /** A byte of the answer arrived: from here on the request is never sent again. */
  private answered = false;
  private whole: { head: ResponseHead; parts: Uint8Array[] } | null = null;
  private queue: BodyQueue | null = null;
  /** Body pieces of the current socket read, handed to the queue together. */
  private readonly pieces: Uint8Array[] = [];
  private paused = false;
  private encoded = false;
  /**
   * What aborts the request: the deadline's hooks, else the signal (both say `aborted` and
   * `reason`). The exchange is its listener itself (handleEvent): no closure a request keeps while it waits.
   */
  private readonly abortSource: AttemptHooks | AbortSignal | undefined;
  /** The caller's deadline, told of a whole answer's head and bytes as they come (transport.ts). */
  private readonly deadline: AttemptHooks | undefined;
  private headReported = false;
  /** The request is larger than the socket surely took at once (see UNREAD_RISK_CHARS). */
  private readonly large: boolean;
  /** The final answer refused the request for its size (413, 414, 431): sent early, before the rest was read. */
  private refused = false;

  constructor(
    private readonly pool: Pool,
    private readonly conn: Connection,
    message: string,
    private readonly o: ExchangeOptions,
    private readonly resolve: (response: Response) => void,
    private readonly reject: (error: unknown) => void,
  ) {
    this.writer = new RequestWriter(message);
    this.large = message.length > UNREAD_RISK_CHARS;
    this.parser = new ResponseParser(o.method, this, o.maxBytes);
    const signal = o.signal;
    // A deadline's own signal carries its hooks too (a caller that passed `deadline.signal`).
    const hooks = (this.deadline = o.hooks ?? attemptHooksOf(signal));
    const source = (this.abortSource = hooks ?? signal);
    if (hooks) hooks.addAbortListener(this);
    else signal?.addEventListener("abort", this);
    conn.owner = this;
    if (source?.aborted) {
      this.handleEvent();
      return;
    }
    // A request aborted (or a connection lost) while held is never written.
    const write = () => {
      if (!this.over) this.writeRequest();
    };
    if (o.hold) o.hold(write);
    else write();
  }

  data(bytes: Uint8Array): void {
    // Bytes before our request left cannot answer it: a late answer to an earlier request.
    if (!this.writer.started) return this.fail(new UpstreamConnectionError("the upstream sent bytes before the request was written", true));
    this.answered = true;
    try {
      this.parser.push(bytes);
    } catch (err) {
      // What this read held before the bytes that broke the framing is the answer's, in order
      // before the failure: dropped, a stream's last frames (its end marker with them) read in the
      // same read as a broken last chunk were lost, and a whole answer the vendor had made and
      // billed was a free 502 (a raw-TCP probe, twenty-first session).
      if (this.queue && this.pieces.length > 0) {
        this.queue.push(this.pieces, true);
        this.pieces.length = 0;
      }
      return this.fail(err);
    }
    const queue = this.queue;
    if (queue && this.pieces.length > 0) {
      // When this read ended the answer, complete() ends the queue next: its reader is told then.
      queue.push(this.pieces, this.parser.done);
      this.pieces.length = 0;
      if (!this.parser.done && queue.full && !this.paused) {
        this.paused = true;
        this.conn.socket.pause();
      }
    }
    if (this.parser.done) this.complete();
    else if (this.whole && this.deadline) {
      // A whole answer still on its way: the deadline times the silence between its bytes from
      // here (an answer whose head and body came in one read never needs to say so).
      this.deadline.answerProgress(!this.headReported);
      this.headReported = true;
    }
  }

  closed(reason: Error): void {
    if (this.over) return;
    // A body that runs until the connection closes ends here.
    if (this.answered && this.parser.close()) return this.complete();
    const message = this.answered ? `${reason.message} before the answer was complete` : reason.message;
    this.fail(new UpstreamConnectionError(message, !this.answered, this.answered));
  }

  drained(): void {
    if (!this.over) this.writeRequest();
  }

  /** Waiting for the answer's first byte (none has come): ended (Pool.cut). An answer on its way is left to finish. */
  cut(reason: Error): void {
    if (!this.answered) this.fail(reason);
  }

  /** Writes what the socket takes of the request; once it is all out, the deadline is told (billing: the upstream has it). */
  private writeRequest(): void {
    const writer = this.writer;
    if (writer.finished) return;
    writer.write(this.conn.socket);
    if (writer.finished) this.deadline?.requestSent?.();
  }

  head(head: ResponseHead): void {
    // A 408 on a reused connection is the server timing out the idle connection as our request
    // came (some send one rather than just closing): it never read the request, which RFC 9110
    // (15.5.9) lets the client repeat on a new connection, as it is after a close (client.ts).
    // Handed over, it was a 502 for a request the upstream never saw (a raw-TCP probe).
    if (head.status === 408 && this.o.reused) throw new UpstreamConnectionError("the upstream timed out the reused connection (408)", true);
    // The refusals that come before a body is read (its size, its head's): a 429 or a 503 reads the
    // request first, and a storm of them must not cost a new connection each (a review).
    this.refused = head.status === 413 || head.status === 431 || head.status === 414;
    const parser = this.parser;
    if (parser.bodyless) return this.settle(new UpstreamResponse(null, head));
    const coding = contentCoding(head.fields);
    if (coding === undefined && parser.fixedLength !== null && parser.fixedLength <= BUFFER_WHOLE_BYTES && !isEventStream(head.fields)) {
      // The usual non-stream answer: read it all, then one Response over one buffer. Never an
      // event stream, whatever its framing: one sent with a length (a buffering proxy's) was held
      // whole, so its client got no frame and no keep-alive until it ended, or a 502 at the
      // first-byte limit though frames had come (a raw-TCP probe, 2026-11-30).
      this.whole = { head, parts: [] };
      return;
    }
    const queue = new BodyQueue(this);
    let body = queue.stream();
    if (coding !== undefined) {
      // Thrown for a coding we cannot read: the parser passes it on, and data() fails the call.
      body = decodedBody(body, coding, this.o.maxBytes);
      head = { ...head, fields: decodedFields(head.fields) };
      this.encoded = true;
    }
    this.queue = queue;
    const response = new UpstreamResponse(body, head);
    if (!this.encoded) offerFastReader(response, queue);
    this.settle(response);
  }

  body(bytes: Uint8Array): void {
    if (this.whole) this.whole.parts.push(bytes);
    else this.pieces.push(bytes);
  }

  /** The body's reader took what was queued: a paused socket reads again (BodyQueueOwner). */
  bodyTaken(): void {
    if (this.paused && !this.conn.dead) {
      this.paused = false;
      this.conn.socket.resume();
    }
  }

  /** The body's reader cancelled it: the connection cannot be reused (BodyQueueOwner). */
  bodyCancelled(): void {
    this.queue = null;
    if (this.over) return;
    this.end();
    this.pool.destroy(this.conn, new Error("answer cancelled"));
  }

  private settle(response: Response): void {
    this.settled = true;
    this.resolve(response);
  }

  private complete(): void {
    const whole = this.whole;
    if (whole) {
      this.whole = null;
      const { parts } = whole;
      const bytes = parts.length === 1 ? parts[0]! : Buffer.concat(parts);
      const response = new UpstreamResponse(bytes, whole.head);
      offerWholeBody(response, bytes);
      this.settle(response);
    }
    this.queue?.end();
    this.queue = null;
    this.end();
    // A compressed answer's connection is not kept: its decoded size is only known as it is read.
    // Nor one whose large request was refused for its size: "sent" means the kernel took the bytes,
    // not that the upstream read them. One that answers 413 early and stops reading leaves the rest
    // unread, and the next request on the connection waited for its first-byte limit (a raw-TCP
    // probe: 3 MB).
    if (this.parser.reusable && this.writer.finished && !this.encoded && !(this.large && this.refused)) this.pool.release(this.conn);
    else {
      // More than the answer came: a copy of it, or another one. The origin's connections rest before reuse.
      if (this.parser.overran) this.pool.distrust(this.conn.origin);
      this.pool.destroy(this.conn, new Error("connection not reusable"));
    }
  }

  private fail(error: unknown): void {
    if (this.over) return;
    this.end();
    if (!this.settled) {
      this.settled = true;
      this.reject(error);
    } else if (this.queue) {
      this.queue.end(error);
      this.queue = null;
    }
    this.pool.destroy(this.conn, error instanceof Error ? error : new Error(String(error)));
  }

  /** The request was aborted (its deadline, or its signal's "abort" event). */
  handleEvent(): void {
    this.fail(this.abortSource?.reason ?? new DOMException("aborted", "AbortError"));
  }

  private end(): void {
    this.over = true;
    if (this.deadline) this.deadline.removeAbortListener(this);
    else this.o.signal?.removeEventListener("abort", this);
  }
}

/** Whether the answer is a server-sent event stream (its Content-Type, parameters and case aside). */
function isEventStream(fields: readonly string[]): boolean {
  const type = fieldValue(fields, "content-type");
  return type !== null && EVENT_STREAM.test(type);
}
const EVENT_STREAM = /^[ \t]*text\/event-stream/i;
