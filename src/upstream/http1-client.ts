import type { Socket } from "bun";
import { atEndOfTurn } from "../pipeline/end-of-turn.ts";
import type { UpstreamFetch } from "../pipeline/forward.ts";

/**
 * HTTP/1.1 client for upstream API calls, on `Bun.connect` sockets served by the same event
 * loop as the gateway's own connections.
 *
 * Why not `fetch`: Bun runs `fetch` on a separate HTTP thread, so every call and every body
 * chunk crosses threads. Measured on the bench's loopback (docs/benchmarks.md): the call alone
 * cost 15–20 µs of the request thread, a JSON proxy spent 31 µs of CPU per request on `fetch`
 * against 22 µs on this client, and its p50 latency was 18 µs lower. Upstream calls are narrow
 * (a POST with a JSON body to a fixed origin), so the client is small; anything outside that
 * (other methods, non-string bodies, an HTTP(S) proxy in the environment) goes to `fetch`.
 *
 * The answer is a standard `Response`, so callers cannot tell the two apart.
 */
export interface Http1ClientOptions {
  /** Extra TLS trust (tests use a private CA); the system store is always used. */
  ca?: string;
  /** Seconds an idle pooled connection is kept; under common server keep-alive timeouts. */
  idleSeconds?: number;
  /** Idle connections kept per origin. */
  maxIdlePerOrigin?: number;
  /** Requests the client cannot carry (see above). Defaults to the global `fetch`. */
  fallback?: UpstreamFetch;
  env?: Record<string, string | undefined>;
  /**
   * Asked as each request is about to be written: true holds the write until the event loop's
   * turn ends, so a busy turn's requests leave together (see pipeline/end-of-turn.ts). The
   * gateway says yes while other requests are in flight. Default: write at once.
   */
  coalesce?: () => boolean;
}

export interface Http1Client {
  fetch: UpstreamFetch;
  /** Open sockets, pooled or busy (bench and tests check nothing leaks). */
  openConnections(): number;
  close(): void;
}

const PROXY_VARS = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"];
/** Response heads beyond this are refused; vendors send a few hundred bytes. */
const MAX_HEAD_BYTES = 64 * 1024;
/** Answers with a Content-Length up to this size are handed over whole: one Response, no stream. */
const BUFFER_WHOLE_BYTES = 8 * 1024 * 1024;

type Exchange = {
  /** Called with each piece of the socket's bytes while this exchange owns the connection. */
  data(bytes: Uint8Array): void;
  closed(error: Error): void;
  drained(): void;
};

interface Connection {
  socket: Socket<Connection> | null;
  origin: string;
  exchange: Exchange | null;
  dead: boolean;
}

interface Target {
  origin: string;
  tls: boolean;
  hostname: string;
  port: number;
  requestLine: string;
}

/** CR or LF in a header would let a value start a new header or a new request. */
const BREAKS_HEADER = /[\r\n]/;

class UpstreamConnectionError extends Error {
  constructor(message: string, readonly beforeResponse: boolean) {
    super(message);
  }
}

export function createHttp1Client(options: Http1ClientOptions = {}): Http1Client {
  const env = options.env ?? process.env;
  const fallback: UpstreamFetch = options.fallback ?? ((url, init) => fetch(url, init));
  const viaProxy = PROXY_VARS.some((name) => env[name]);
  const idleSeconds = options.idleSeconds ?? 30;
  const maxIdle = options.maxIdlePerOrigin ?? 256;
  const coalesce = options.coalesce;
  const idle = new Map<string, Connection[]>();
  const open = new Set<Connection>();

  const handlers = {
    data(socket: Socket<Connection>, bytes: Uint8Array) {
      const conn = socket.data;
      if (conn.exchange) conn.exchange.data(bytes);
      // Bytes on an idle connection break HTTP/1.1 framing: the connection is useless.
      else discard(conn);
    },
    drain(socket: Socket<Connection>) {
      socket.data.exchange?.drained();
    },
    close(socket: Socket<Connection>) {
      lost(socket.data, new UpstreamConnectionError("the upstream closed the connection", true));
    },
    error(socket: Socket<Connection>, error: Error) {
      lost(socket.data, error);
    },
    handshake(socket: Socket<Connection>, success: boolean, authorizationError: Error | null) {
      // Verification failures close the socket anyway; this keeps the reason for the log.
      if (!success || authorizationError) {
        lost(socket.data, new UpstreamConnectionError(`TLS handshake with the upstream failed: ${authorizationError?.message ?? "refused"}`, true));
        socket.terminate();
      }
    },
    timeout(socket: Socket<Connection>) {
      // Only idle connections have a timeout set.
      discard(socket.data);
    },
  };

  function lost(conn: Connection, error: Error): void {
    if (conn.dead) return;
    conn.dead = true;
    open.delete(conn);
    unpool(conn);
    const exchange = conn.exchange;
    conn.exchange = null;
    exchange?.closed(error);
  }

  function discard(conn: Connection): void {
    const socket = conn.socket;
    lost(conn, new UpstreamConnectionError("connection discarded", false));
    socket?.terminate();
  }

  function unpool(conn: Connection): void {
    const list = idle.get(conn.origin);
    const at = list ? list.indexOf(conn) : -1;
    if (at >= 0) list!.splice(at, 1);
  }

  function release(conn: Connection): void {
    conn.exchange = null;
    if (conn.dead) return;
    let list = idle.get(conn.origin);
    if (!list) idle.set(conn.origin, (list = []));
    if (list.length >= maxIdle) return discard(conn);
    conn.socket!.timeout(idleSeconds);
    list.push(conn);
  }

  /** Parsed once per URL: the same few upstream URLs serve every request. */
  const targets = new Map<string, Target | null>();
  function targetOf(url: string): Target | null {
    let target = targets.get(url);
    if (target === undefined) {
      const u = new URL(url);
      const tls = u.protocol === "https:";
      target = u.protocol !== "http:" && !tls ? null : {
        origin: `${u.protocol}//${u.host}`,
        tls,
        hostname: u.hostname.startsWith("[") ? u.hostname.slice(1, -1) : u.hostname,
        port: Number(u.port || (tls ? 443 : 80)),
        requestLine: `POST ${u.pathname}${u.search} HTTP/1.1\r\nhost: ${u.host}\r\n`,
      };
      if (targets.size > 1000) targets.clear();
      targets.set(url, target);
    }
    return target;
  }

  async function connect(target: Target): Promise<Connection> {
    const conn: Connection = { socket: null, origin: target.origin, exchange: null, dead: false };
    const { tls, hostname, port } = target;
    conn.socket = await Bun.connect<Connection>({
      hostname,
      port,
      data: conn,
      socket: handlers,
      ...(tls ? { tls: { serverName: hostname, rejectUnauthorized: true, ...(options.ca ? { ca: options.ca } : {}) } } : {}),
    });
    conn.socket.setNoDelay(true);
    open.add(conn);
    return conn;
  }

  function take(origin: string): Connection | undefined {
    const list = idle.get(origin);
    while (list && list.length > 0) {
      const conn = list.pop()!;
      if (!conn.dead) {
        conn.socket!.timeout(0);
        return conn;
      }
    }
    return undefined;
  }

  async function request(url: string, init: RequestInit): Promise<Response> {
    const method = (init.method ?? "GET").toUpperCase();
    const headers = init.headers;
    if (viaProxy || method !== "POST" || typeof init.body !== "string" || !isPlainRecord(headers)) return fallback(url, init);
    const target = targetOf(url);
    if (!target) return fallback(url, init);
    const signal = init.signal ?? undefined;
    signal?.throwIfAborted();

    let head = target.requestLine;
    let hasAccept = false;
    let hasEncoding = false;
    for (const name in headers) {
      const value = headers[name]!;
      if (BREAKS_HEADER.test(name) || BREAKS_HEADER.test(value)) throw new TypeError(`invalid header ${name}`);
      const lower = name.toLowerCase();
      if (lower === "host" || lower === "content-length" || lower === "connection" || lower === "transfer-encoding") continue;
      if (lower === "accept") hasAccept = true;
      else if (lower === "accept-encoding") hasEncoding = true;
      head += `${name}: ${value}\r\n`;
    }
    if (!hasAccept) head += "accept: */*\r\n";
    // Compression saves nothing on loopback or in a datacentre and costs CPU on every chunk.
    if (!hasEncoding) head += "accept-encoding: identity\r\n";
    const message = `${head}content-length: ${Buffer.byteLength(init.body)}\r\n\r\n${init.body}`;

    const origin = target.origin;
    // A pooled connection the server closed meanwhile fails before any answer: once, on a new one.
    for (let attempt = 0; ; attempt++) {
      const pooled = attempt === 0 ? take(origin) : undefined;
      let conn: Connection;
      try {
        conn = pooled ?? (await connect(target));
      } catch (err) {
        throw new UpstreamConnectionError(`could not connect to the upstream: ${(err as Error).message ?? err}`, true);
      }
      try {
        return await exchange(conn, message, method, signal);
      } catch (err) {
        if (pooled && err instanceof UpstreamConnectionError && err.beforeResponse && !signal?.aborted) continue;
        throw err;
      }
    }
  }

  function exchange(conn: Connection, message: string, method: string, signal: AbortSignal | undefined): Promise<Response> {
    return new Promise<Response>((resolve, reject) => {
      const socket = conn.socket!;
      let unsent: string | Buffer | null = message;
      let settled = false;
      let body: BodyQueue | null = null;
      let whole: { head: ResponseHead; parts: Uint8Array[] } | null = null;
      let paused = false;
      const parser = createResponseParser(method);

      const onAbort = () => {
        const reason = signal!.reason ?? new DOMException("aborted", "AbortError");
        fail(reason);
        discard(conn);
      };
      signal?.addEventListener("abort", onAbort, { once: true });

      const finish = () => {
        signal?.removeEventListener("abort", onAbort);
        if (parser.reusable && unsent === null) release(conn);
        else discard(conn);
      };

      const fail = (error: unknown) => {
        signal?.removeEventListener("abort", onAbort);
        if (!settled) {
          settled = true;
          reject(error);
        } else if (body) {
          body.end(error);
          body = null;
        }
      };

      let unsentBytes = Buffer.byteLength(message);
      const write = () => {
        while (unsent) {
          const n = socket.write(unsent);
          if (n <= 0) return;
          if (n >= unsentBytes) {
            unsent = null;
            return;
          }
          // Counts are bytes: what a partial write left of a string is cut from its bytes.
          unsent = (typeof unsent === "string" ? Buffer.from(unsent) : unsent).subarray(n);
          unsentBytes -= n;
        }
      };

      conn.exchange = {
        data(bytes) {
          let result: ParseResult;
          try {
            result = parser.push(bytes);
          } catch (err) {
            fail(new UpstreamConnectionError(`the upstream sent a malformed answer: ${(err as Error).message}`, !settled));
            discard(conn);
            return;
          }
          if (result.head && !settled) {
            const { status, statusText, headers } = result.head;
            if (parser.bodyless) {
              settled = true;
              resolve(new Response(null, { status, statusText, headers }));
            } else if (parser.fixedLength !== null && parser.fixedLength <= BUFFER_WHOLE_BYTES && !headers.has("content-encoding")) {
              // The usual non-stream answer: read it all, then one Response over one buffer.
              whole = { head: result.head, parts: [] };
            } else {
              const queue = new BodyQueue(
                () => {
                  if (paused && !conn.dead) {
                    paused = false;
                    socket.resume();
                  }
                },
                () => {
                  body = null;
                  if (!parser.done) discard(conn);
                },
              );
              let stream: ReadableStream<Uint8Array>;
              try {
                stream = decoded(queue.stream(), headers);
              } catch (err) {
                // An encoding we cannot read: an error for the caller, never one thrown into the socket's callback.
                fail(err);
                discard(conn);
                return;
              }
              settled = true;
              body = queue;
              const response = new Response(stream, { status, statusText, headers });
              if (!headers.has("content-encoding")) readers.set(response, queue);
              resolve(response);
            }
          }
          if (whole) {
            for (const chunk of result.chunks) whole.parts.push(chunk);
            if (parser.done) {
              const { head, parts } = whole;
              whole = null;
              settled = true;
              signal?.removeEventListener("abort", onAbort);
              resolve(new Response(parts.length === 1 ? parts[0] : Buffer.concat(parts), head));
            }
          } else if (body) {
            if (result.chunks.length > 0) body.push(result.chunks);
            if (!parser.done && body.full && !paused) {
              paused = true;
              socket.pause();
            }
          }
          if (parser.done) {
            body?.end();
            body = null;
            finish();
          }
        },
        closed(error) {
          // A body that runs until the connection closes ends here.
          if (parser.endsAtClose() && body) {
            body.end();
            body = null;
            signal?.removeEventListener("abort", onAbort);
            return;
          }
          fail(error instanceof UpstreamConnectionError ? new UpstreamConnectionError(error.message, !settled) : error);
        },
        drained: write,
      };
      // A request aborted (or a connection lost) while held is never written.
      if (coalesce?.()) atEndOfTurn(() => conn.dead || write());
      else write();
    });
  }

  return {
    fetch: request,
    openConnections: () => open.size,
    close() {
      for (const conn of [...open]) discard(conn);
    },
  };
}

export type ReadResult = { done: false; value: Uint8Array } | { done: true; value: undefined };

/** What the stream pipeline needs of a body: the subset of a ReadableStream reader it uses. */
export interface ChunkReader {
  read(): Promise<ReadResult>;
  cancel(reason?: unknown): Promise<void>;
}

const readers = new WeakMap<Response, BodyQueue>();

/**
 * The body of a streamed answer from this client without the ReadableStream machinery, which
 * costs about a microsecond per chunk; undefined for other responses or once the body is in use.
 */
export function fastReader(response: Response): ChunkReader | undefined {
  const queue = readers.get(response);
  if (!queue || response.bodyUsed || queue.claimed) return undefined;
  queue.claimed = true;
  return queue;
}

/**
 * Chunks between the socket and one reader. Either `read()` is used directly (the stream
 * pipeline) or through `stream()` (everything else: `text()`, `json()`), never both.
 */
class BodyQueue implements ChunkReader {
  claimed = false;
  private chunks: Uint8Array[] = [];
  private waiting: { resolve: (r: ReadResult) => void; reject: (e: unknown) => void } | null = null;
  private ended = false;
  private failure: unknown = undefined;

  constructor(private readonly onDrained: () => void, private readonly onCancel: () => void) {}

  private queuedBytes = 0;

  /** Past this much unread body the socket is paused until the reader catches up. */
  get full(): boolean {
    return this.queuedBytes >= 64 * 1024;
  }

  /** One socket read's worth of body: handed over as one piece, so a burst costs one pass downstream. */
  push(chunks: Uint8Array[]): void {
    const waiting = this.waiting;
    if (waiting) {
      this.waiting = null;
      waiting.resolve({ done: false, value: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks) });
    } else {
      for (const chunk of chunks) {
        this.chunks.push(chunk);
        this.queuedBytes += chunk.byteLength;
      }
    }
  }

  end(error?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.failure = error;
    const waiting = this.waiting;
    this.waiting = null;
    if (!waiting) return;
    if (error !== undefined) waiting.reject(error);
    else waiting.resolve({ done: true, value: undefined });
  }

  read(): Promise<ReadResult> {
    if (this.chunks.length > 0) {
      const queued = this.chunks;
      this.chunks = [];
      this.queuedBytes = 0;
      this.onDrained();
      return Promise.resolve({ done: false, value: queued.length === 1 ? queued[0]! : Buffer.concat(queued) });
    }
    if (this.ended) return this.failure !== undefined ? Promise.reject(this.failure) : Promise.resolve({ done: true, value: undefined });
    this.onDrained();
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
    });
  }

  cancel(): Promise<void> {
    this.chunks = [];
    this.queuedBytes = 0;
    if (!this.ended) {
      this.ended = true;
      this.onCancel();
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

function isPlainRecord(value: unknown): value is Record<string, string> {
  if (value === undefined || value === null || typeof value !== "object" || Array.isArray(value)) return false;
  if (value instanceof Headers) return false;
  for (const key in value) if (typeof (value as Record<string, unknown>)[key] !== "string") return false;
  return true;
}

/** We ask for identity; a server that compresses anyway is decoded, and says so no more. */
function decoded(stream: ReadableStream<Uint8Array>, headers: Headers): ReadableStream<Uint8Array> {
  const encoding = headers.get("content-encoding")?.trim().toLowerCase();
  if (!encoding || encoding === "identity") return stream;
  const format = ({ gzip: "gzip", "x-gzip": "gzip", deflate: "deflate", br: "brotli", zstd: "zstd" } as Record<string, string>)[encoding];
  if (!format) throw new UpstreamConnectionError(`unsupported content-encoding ${encoding}`, false);
  headers.delete("content-encoding");
  headers.delete("content-length");
  // Bun's names ("brotli", "zstd") are wider than the DOM typings.
  return stream.pipeThrough(new DecompressionStream(format as "gzip") as unknown as ReadableWritablePair<Uint8Array, Uint8Array>);
}

interface ResponseHead {
  status: number;
  statusText: string;
  headers: Headers;
}

interface ParseResult {
  head: ResponseHead | null;
  chunks: Uint8Array[];
}

const enum State {
  Head,
  Fixed,
  ChunkSize,
  ChunkData,
  ChunkDataEnd,
  Trailers,
  UntilClose,
  Done,
}

const latin1 = new TextDecoder("latin1");

/** The hex size at the start of a chunk line; chunk extensions (";name=value") carry nothing we use. */
function chunkSize(buf: Uint8Array, from: number, end: number): number {
  let size = 0;
  let digits = 0;
  let i = from;
  for (; i < end; i++) {
    const c = buf[i]!;
    const digit = c >= 48 && c <= 57 ? c - 48 : c >= 97 && c <= 102 ? c - 87 : c >= 65 && c <= 70 ? c - 55 : -1;
    if (digit < 0) break;
    if (++digits > 8) throw new Error("chunk size too large");
    size = size * 16 + digit;
  }
  for (; i < end && (buf[i] === 32 || buf[i] === 9); i++);
  if (digits === 0 || (i < end && buf[i] !== 59)) throw new Error("bad chunk size");
  return size;
}

/** A plain view: Buffer's slice/subarray go through its species constructor, several times dearer. */
function view(buf: Uint8Array, at: number, length: number): Uint8Array {
  return new Uint8Array(buf.buffer, buf.byteOffset + at, length);
}

/**
 * Incremental HTTP/1.1 response parser: any split of the bytes gives the same result. Bun hands
 * each socket read its own buffer, so body chunks are views into it, not copies.
 */
export function createResponseParser(method: string) {
  let state = State.Head;
  let pending: Uint8Array | null = null;
  let remaining = 0;
  let keepAlive = true;
  let bodyless = false;
  let fixedLength: number | null = null;

  function indexOfCrlf(buf: Uint8Array, from: number): number {
    for (let i = buf.indexOf(13, from); i >= 0 && i < buf.length - 1; i = buf.indexOf(13, i + 1)) {
      if (buf[i + 1] === 10) return i;
    }
    return -1;
  }

  function indexOfHeadEnd(buf: Uint8Array, from: number): number {
    for (let i = indexOfCrlf(buf, from); i >= 0; i = indexOfCrlf(buf, i + 2)) {
      if (buf[i + 2] === 13 && buf[i + 3] === 10) return i;
    }
    return -1;
  }

  function parseHead(text: string): ResponseHead | null {
    const lines = text.split("\r\n");
    const status = /^HTTP\/1\.([01]) (\d{3})(?: (.*))?$/.exec(lines[0]!);
    if (!status) throw new Error("bad status line");
    const code = Number(status[2]);
    const headers = new Headers();
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i]!;
      const colon = line.indexOf(":");
      if (colon <= 0) throw new Error("bad header line");
      headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
    }
    // 1xx heads are informational; the real one follows.
    if (code >= 100 && code < 200) return null;
    const connection = (headers.get("connection") ?? "").toLowerCase();
    keepAlive = status[1] === "1" ? !connection.includes("close") : connection.includes("keep-alive");
    const transfer = (headers.get("transfer-encoding") ?? "").toLowerCase();
    const length = headers.get("content-length");
    if (method === "HEAD" || code === 204 || code === 304) {
      bodyless = true;
      state = State.Done;
    } else if (transfer) {
      if (!transfer.split(",").map((s) => s.trim()).includes("chunked")) {
        state = State.UntilClose;
        keepAlive = false;
      } else state = State.ChunkSize;
      headers.delete("transfer-encoding");
      headers.delete("content-length");
    } else if (length !== null) {
      if (!/^\d+$/.test(length.trim())) throw new Error("bad content-length");
      remaining = fixedLength = Number(length);
      state = remaining === 0 ? State.Done : State.Fixed;
    } else {
      state = State.UntilClose;
      keepAlive = false;
    }
    return { status: code, statusText: status[3] ?? "", headers };
  }

  return {
    get done() {
      return state === State.Done;
    },
    get bodyless() {
      return bodyless;
    },
    /** The body's size when the head announced one. */
    get fixedLength() {
      return fixedLength;
    },
    /** Whether the connection may carry another request after this answer. */
    get reusable() {
      return state === State.Done && keepAlive && pending === null;
    },
    endsAtClose: () => state === State.UntilClose,

    push(bytes: Uint8Array): ParseResult {
      const out: ParseResult = { head: null, chunks: [] };
      let buf = bytes;
      if (pending) {
        buf = Buffer.concat([pending, bytes]);
        pending = null;
      }
      let pos = 0;
      while (pos < buf.length && state !== State.Done) {
        switch (state) {
          case State.Head: {
            const end = indexOfHeadEnd(buf, pos);
            if (end < 0) {
              if (buf.length - pos > MAX_HEAD_BYTES) throw new Error("response head too large");
              pending = view(buf, pos, buf.length - pos);
              return out;
            }
            const head = parseHead(latin1.decode(view(buf, pos, end - pos)));
            pos = end + 4;
            if (head) out.head = head;
            break;
          }
          case State.Fixed:
          case State.ChunkData: {
            const take = Math.min(remaining, buf.length - pos);
            out.chunks.push(view(buf, pos, take));
            pos += take;
            remaining -= take;
            if (remaining === 0) state = state === State.Fixed ? State.Done : State.ChunkDataEnd;
            break;
          }
          case State.ChunkSize: {
            const end = indexOfCrlf(buf, pos);
            if (end < 0) {
              if (buf.length - pos > 1024) throw new Error("chunk size line too long");
              pending = view(buf, pos, buf.length - pos);
              return out;
            }
            remaining = chunkSize(buf, pos, end);
            pos = end + 2;
            state = remaining === 0 ? State.Trailers : State.ChunkData;
            break;
          }
          case State.ChunkDataEnd: {
            if (buf.length - pos < 2) {
              pending = view(buf, pos, buf.length - pos);
              return out;
            }
            if (buf[pos] !== 13 || buf[pos + 1] !== 10) throw new Error("missing CRLF after chunk");
            pos += 2;
            state = State.ChunkSize;
            break;
          }
          case State.Trailers: {
            const end = indexOfCrlf(buf, pos);
            if (end < 0) {
              if (buf.length - pos > MAX_HEAD_BYTES) throw new Error("trailers too large");
              pending = view(buf, pos, buf.length - pos);
              return out;
            }
            // Trailer lines are skipped; an empty line ends the message.
            if (end === pos) state = State.Done;
            pos = end + 2;
            break;
          }
          case State.UntilClose: {
            out.chunks.push(view(buf, pos, buf.length - pos));
            pos = buf.length;
            break;
          }
        }
      }
      // Bytes past the end of an answer we did not ask for: the connection cannot be reused.
      if (pos < buf.length) keepAlive = false;
      return out;
    },
  };
}
