import { ResponseTooLargeError } from "../transport.ts";

/**
 * Incremental HTTP/1.1 response parser: bytes in, a head and body pieces out. Any split of the
 * bytes gives the same result, and every buffer it keeps is bounded. Pure: no sockets, no clock.
 *
 * Strict where being lenient would let one answer be read as another's: a framing it cannot be
 * sure of is an error (both Content-Length and Transfer-Encoding, a transfer coding other than
 * chunked, differing lengths, malformed chunk sizes), and whatever makes the next answer's start
 * uncertain makes the connection not reusable (bytes after the end, an interim answer other than
 * 100 Continue, HTTP/1.0, `Connection: close`, a body that ends at close).
 *
 * Body pieces are views into the pushed buffers (small Content-Length bodies excepted, see
 * COPY_MAX_BYTES): Bun hands each socket read its own buffer, so a view stays valid after the
 * read, and the parser may move bytes within it. Each push yields at most one piece.
 *
 * A little over 300 lines, all of it one job: most of the length is the checks above, each a
 * line or two, and splitting heads from bodies would split one state machine in two.
 */
export interface ResponseHead {
  status: number;
  statusText: string;
  /**
   * The header fields as sent, flat: name, value, name, value… Names keep their case; values are
   * trimmed. A `Headers` is built only when someone asks for one (upstream-response.ts): most
   * answers are read for their body alone, and building one cost ~140 ns a field.
   */
  fields: string[];
}

/** A field's value by its lower-case name, repeated fields joined with ", " (as `Headers.get`); null when absent. */
export function fieldValue(fields: readonly string[], name: string): string | null {
  let value: string | null = null;
  for (let i = 0; i < fields.length; i += 2) {
    if (isField(fields[i]!, name)) value = value === null ? fields[i + 1]! : `${value}, ${fields[i + 1]}`;
  }
  return value;
}

/** The fields without `name` (lower case; matched case-insensitively). */
export function withoutField(fields: readonly string[], name: string): string[] {
  const kept: string[] = [];
  for (let i = 0; i < fields.length; i += 2) if (!isField(fields[i]!, name)) kept.push(fields[i]!, fields[i + 1]!);
  return kept;
}

/** A field named `name` (lower case), in any case: lengths first, so most names are never lower-cased. */
function isField(field: string, name: string): boolean {
  return field.length === name.length && field.toLowerCase() === name;
}

export interface ResponseSink {
  /** The final head (interim 1xx heads are not reported). */
  head(head: ResponseHead): void;
  /** A piece of the body, in order. */
  body(bytes: Uint8Array): void;
}

const HTTP1 = [72, 84, 84, 80, 47, 49, 46]; // "HTTP/1."

/** Whether the bytes from `pos` (as many as there are, up to 7) could begin `HTTP/1.`. */
function startsLikeHttp1(buf: Uint8Array, pos: number): boolean {
  const n = Math.min(HTTP1.length, buf.length - pos);
  for (let i = 0; i < n; i++) if (buf[pos + i] !== HTTP1[i]) return false;
  return true;
}

/** The bytes are not an HTTP/1.1 answer we can delimit with certainty. */
export class ResponseFramingError extends Error {
  constructor(message: string) {
    super(`the upstream sent a malformed answer: ${message}`);
    this.name = "ResponseFramingError";
  }
}

/** Response heads (all interim heads included) beyond this are refused; vendors send a few hundred bytes. */
export const MAX_HEAD_BYTES = 64 * 1024;
/** A chunk-size line, extensions included. */
const MAX_CHUNK_LINE_BYTES = 1024;

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

const STATUS_LINE = /^HTTP\/1\.([01]) ([1-5]\d\d)(?: ([^\r\n]*))?$/;
const DIGITS = /^\d{1,15}$/;
/**
 * What `Headers` accepts: a token for a name (so no spaces, no folded lines), a value without CR,
 * LF or NUL. Heads are read as latin1, so no character is above 0xFF; one that were would be
 * refused here rather than by `Headers` later, far from the transport.
 */
const FIELD_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const BAD_FIELD_VALUE = /[\r\n\0\u0100-\uffff]/;

/**
 * The body of an answer with a Content-Length up to this size is copied out of the socket's
 * buffer instead of viewed. A view needs the buffer's ArrayBuffer, which JavaScriptCore makes on
 * first request: parsing a 600-byte JSON answer and reading it as text took 5.3 µs with a view and
 * 4.2 µs with a copy (measured). A stream's pieces stay views: copied, they cost loopback streams
 * 5 % more CPU (measured paired), the copies' memory being the dearer part there.
 */
export const COPY_MAX_BYTES = 8 * 1024;

export class ResponseParser {
  private state = State.Head;
  /**
   * An unfinished head, chunk-size line or trailer, kept for the next push. It grows by
   * doubling and is searched only where it was not yet, so a head dribbled a byte at a time
   * costs linear time, not quadratic.
   */
  private carry: Uint8Array | null = null;
  private carried = 0;
  private searched = 0;
  private remaining = 0;
  private keepAlive = true;
  /** Something made the next answer's start uncertain, though this one is whole. */
  private tainted = false;
  /** Bytes came after the end of the answer (a second answer, a wrong length). */
  overran = false;
  private headBytes = 0;
  private bodyBytes = 0;
  private isBodyless = false;
  private length: number | null = null;

  constructor(
    private readonly method: string,
    private readonly sink: ResponseSink,
    private readonly maxBodyBytes = Number.POSITIVE_INFINITY,
  ) {}

  /** The whole answer has been read. */
  get done(): boolean {
    return this.state === State.Done;
  }

  /** The answer has no body (HEAD, 204, 304). */
  get bodyless(): boolean {
    return this.isBodyless;
  }

  /** The body's size when the head announced one. */
  get fixedLength(): number | null {
    return this.length;
  }

  /** The connection may carry another request: this answer is whole and nothing about it was off. */
  get reusable(): boolean {
    return this.state === State.Done && this.keepAlive && !this.tainted && this.carried === 0;
  }

  /** Throws ResponseFramingError, or ResponseTooLargeError once the body passes the cap. */
  push(bytes: Uint8Array): void {
    let buf = bytes;
    /** Where the search for the current token's end starts: past what earlier pushes searched. */
    let from = 0;
    if (this.carried > 0) {
      buf = this.appendToCarry(bytes);
      from = this.searched;
    }
    try {
      this.parse(buf, from, buf !== bytes);
    } finally {
      // One piece per push: a burst of 20 chunks is one body piece, not 20 to concatenate later.
      if (this.bodyStart >= 0) {
        // A whole small answer is copied out (see COPY_MAX_BYTES); a stream's pieces stay views.
        const piece = this.length !== null && this.length <= COPY_MAX_BYTES
          ? copyOf(buf, this.bodyStart, this.bodyEnd)
          : view(buf, this.bodyStart, this.bodyEnd - this.bodyStart);
        this.bodyStart = -1;
        this.sink.body(piece);
      }
    }
  }

  /**
   * The body bytes of one push, gathered where the first of them is: each chunk's data is moved
   * down over the chunk framing before it (the buffer is ours, see above), so a chunked burst
   * becomes one contiguous view with no allocation; `push` hands it over at the end.
   */
  private bodyStart = -1;
  private bodyEnd = 0;

  private gather(buf: Uint8Array, pos: number, length: number): void {
    if (this.bodyStart < 0) {
      this.bodyStart = pos;
      this.bodyEnd = pos + length;
      return;
    }
    if (this.bodyEnd !== pos) buf.copyWithin(this.bodyEnd, pos, pos + length);
    this.bodyEnd += length;
  }

  private parse(buf: Uint8Array, from: number, inCarry: boolean): void {
    let pos = 0;
    while (pos < buf.length && this.state !== State.Done) {
      switch (this.state) {
        case State.Head: {
          const end = indexOfHeadEnd(buf, Math.max(pos, from));
          if (end < 0) {
            if (this.headBytes + buf.length - pos > MAX_HEAD_BYTES) throw new ResponseFramingError("response head too large");
            // A head whose lines end in a bare LF never ends in CRLF CRLF: said now, not at the first-byte limit.
            if (hasBareLf(buf, pos, Math.max(pos, from - 1))) throw new ResponseFramingError("a line of the head ends in a bare LF");
            // Likewise a bare CR (old Mac line ends; RFC 9112 §2.2 lets a recipient refuse it, and
            // no field value may hold one): a JSON body after such a head has no LF to give it away.
            if (hasBareCr(buf, Math.max(pos, from - 1))) throw new ResponseFramingError("a line of the head ends in a bare CR");
            // Bytes that cannot begin `HTTP/1.` are no HTTP/1 answer (an HTTP/2 server's SETTINGS
            // frame, TLS on a plain port): said now, not at the first-byte limit (a raw-TCP probe).
            if (!startsLikeHttp1(buf, pos)) throw new ResponseFramingError("the answer is not HTTP/1");
            return this.keep(buf, pos);
          }
          this.headBytes += end + 4 - pos;
          if (this.headBytes > MAX_HEAD_BYTES) throw new ResponseFramingError("response head too large");
          this.parseHead(latin1Text(buf, pos, end));
          pos = end + 4;
          break;
        }
        case State.Fixed:
        case State.ChunkData: {
          const take = Math.min(this.remaining, buf.length - pos);
          // The body holds views into this buffer: the carry must not be reused under them.
          if (inCarry) this.carry = null;
          this.gather(buf, pos, take);
          pos += take;
          this.remaining -= take;
          if (this.remaining === 0) this.state = this.state === State.Fixed ? State.Done : State.ChunkDataEnd;
          break;
        }
        case State.ChunkSize: {
          const end = indexOfCrlf(buf, Math.max(pos, from));
          if (end < 0) {
            if (buf.length - pos > MAX_CHUNK_LINE_BYTES) throw new ResponseFramingError("chunk size line too long");
            // As in the head: a line ended by a bare LF never ends in CRLF. Said now, not at the
            // idle limit the answer would otherwise wait for (a raw-TCP probe: "5\nhello\n0\n\n").
            if (hasBareLf(buf, pos, Math.max(pos, from - 1))) throw new ResponseFramingError("a chunk size line ends in a bare LF");
            if (hasBareCr(buf, Math.max(pos, from - 1))) throw new ResponseFramingError("a chunk size line ends in a bare CR");
            return this.keep(buf, pos);
          }
          if (end - pos > MAX_CHUNK_LINE_BYTES) throw new ResponseFramingError("chunk size line too long");
          const size = chunkSize(buf, pos, end);
          this.countBody(size);
          this.remaining = size;
          pos = end + 2;
          this.state = size === 0 ? State.Trailers : State.ChunkData;
          break;
        }
        case State.ChunkDataEnd: {
          if (buf.length - pos < 2) {
            if (buf[pos] !== 13) throw new ResponseFramingError("missing CRLF after chunk");
            return this.keep(buf, pos);
          }
          if (buf[pos] !== 13 || buf[pos + 1] !== 10) throw new ResponseFramingError("missing CRLF after chunk");
          pos += 2;
          this.state = State.ChunkSize;
          break;
        }
        case State.Trailers: {
          const end = indexOfCrlf(buf, Math.max(pos, from));
          const size = (end < 0 ? buf.length : end + 2) - pos;
          // Trailers share the head's budget: an endless trailer is as bad as an endless head.
          if (this.headBytes + size > MAX_HEAD_BYTES) throw new ResponseFramingError("trailers too large");
          if (end < 0) {
            if (hasBareLf(buf, pos, Math.max(pos, from - 1))) throw new ResponseFramingError("a trailer line ends in a bare LF");
            if (hasBareCr(buf, Math.max(pos, from - 1))) throw new ResponseFramingError("a trailer line ends in a bare CR");
            return this.keep(buf, pos);
          }
          this.headBytes += size;
          // Trailer fields carry nothing we use; the empty line ends the message.
          if (end === pos) this.state = State.Done;
          pos = end + 2;
          break;
        }
        case State.UntilClose: {
          this.countBody(buf.length - pos);
          if (inCarry) this.carry = null;
          this.gather(buf, pos, buf.length - pos);
          pos = buf.length;
          break;
        }
      }
    }
    // Bytes past the end of the answer: a second answer, or a wrong length. Either way the
    // connection's framing can no longer be trusted.
    if (pos < buf.length) this.tainted = this.overran = true;
  }

  /**
   * The connection closed: true when that ended the answer (a body delimited by close). False
   * for any other unfinished answer, which is never handed over as a whole one.
   */
  close(): boolean {
    if (this.state === State.UntilClose) this.state = State.Done;
    return this.state === State.Done;
  }

  /** Appends a push's bytes to the carry; returns a view of all of it. */
  private appendToCarry(bytes: Uint8Array): Uint8Array {
    const carry = this.carry!;
    const length = this.carried + bytes.length;
    let into = carry;
    if (length > carry.length) {
      into = new Uint8Array(Math.max(length, carry.length * 2));
      into.set(view(carry, 0, this.carried));
      this.carry = into;
    }
    into.set(bytes, this.carried);
    this.carried = 0;
    return view(into, 0, length);
  }

  /** Keeps buf[pos..] for the next push: an unfinished token. */
  private keep(buf: Uint8Array, pos: number): void {
    const tail = buf.length - pos;
    if (this.carry && buf.buffer === this.carry.buffer) this.carry.copyWithin(0, pos, buf.length);
    else {
      if (!this.carry || this.carry.length < tail) this.carry = new Uint8Array(Math.max(tail, 1024));
      this.carry.set(view(buf, pos, tail));
    }
    this.carried = tail;
    // The end of a token is at most 4 bytes long: what it could start in is searched again.
    this.searched = Math.max(0, tail - 3);
  }

  private countBody(bytes: number): void {
    this.bodyBytes += bytes;
    if (this.bodyBytes > this.maxBodyBytes) throw new ResponseTooLargeError(this.maxBodyBytes);
  }

  private parseHead(text: string): void {
    const lines = text.split("\r\n");
    const status = STATUS_LINE.exec(lines[0]!);
    if (!status) throw new ResponseFramingError("bad status line");
    const code = Number(status[2]);
    let fields: string[] = [];
    for (let i = 1; i < lines.length; i++) {
      const line = lines[i]!;
      const colon = line.indexOf(":");
      if (colon <= 0) throw new ResponseFramingError("bad header line");
      const name = line.slice(0, colon);
      const value = line.slice(colon + 1).trim();
      if (!FIELD_NAME.test(name) || BAD_FIELD_VALUE.test(value)) throw new ResponseFramingError("bad header line");
      fields.push(name, value);
    }
    if (code < 200) {
      if (code === 101) throw new ResponseFramingError("the upstream switched protocols");
      // 100 Continue is the interim answer HTTP/1.1 clients expect; anything else, read past but not trusted after.
      if (code !== 100) this.tainted = true;
      return;
    }
    const connection = (fieldValue(fields, "connection") ?? "").toLowerCase();
    // HTTP/1.0 keep-alive is a dialect of its own; such an answer's connection is not reused.
    this.keepAlive = status[1] === "1" && !connection.includes("close");
    const transfer = fieldValue(fields, "transfer-encoding");
    const length = fieldValue(fields, "content-length");
    if (this.method === "HEAD" || code === 204 || code === 304) {
      this.isBodyless = true;
      this.state = State.Done;
    } else if (transfer !== null) {
      if (length !== null) throw new ResponseFramingError("both content-length and transfer-encoding");
      if (transfer.trim().toLowerCase() !== "chunked") throw new ResponseFramingError(`unsupported transfer-encoding ${transfer}`);
      fields = withoutField(fields, "transfer-encoding");
      this.state = State.ChunkSize;
    } else if (length !== null) {
      this.length = contentLength(length);
      if (this.length > this.maxBodyBytes) throw new ResponseTooLargeError(this.maxBodyBytes, code);
      this.remaining = this.length;
      this.state = this.length === 0 ? State.Done : State.Fixed;
    } else {
      this.state = State.UntilClose;
      this.keepAlive = false;
    }
    this.sink.head({ status: code, statusText: status[3] ?? "", fields });
  }
}

/** Repeated Content-Length values are allowed when they agree (RFC 9112 §6.3). */
function contentLength(value: string): number {
  let length = -1;
  for (const part of value.split(",")) {
    const digits = part.trim();
    if (!DIGITS.test(digits) || (length >= 0 && Number(digits) !== length)) throw new ResponseFramingError("bad content-length");
    length = Number(digits);
  }
  return length;
}

/** The hex size at the start of a chunk line; chunk extensions (";name=value") carry nothing we use. */
function chunkSize(buf: Uint8Array, from: number, end: number): number {
  let size = 0;
  let digits = 0;
  let zeros = 0;
  let i = from;
  for (; i < end; i++) {
    const c = buf[i]!;
    const digit = c >= 48 && c <= 57 ? c - 48 : c >= 97 && c <= 102 ? c - 87 : c >= 65 && c <= 70 ? c - 55 : -1;
    if (digit < 0) break;
    // Leading zeros are the same size (RFC 9112 allows them): only significant digits count toward the cap.
    if (size > 0 || digit > 0) digits++;
    if (digits > 8) throw new ResponseFramingError("chunk size too large");
    size = size * 16 + digit;
    if (digits === 0) zeros++;
  }
  for (; i < end && (buf[i] === 32 || buf[i] === 9); i++);
  if (digits + zeros === 0 || zeros > 64 || (i < end && buf[i] !== 59)) throw new ResponseFramingError("bad chunk size");
  return size;
}

function indexOfCrlf(buf: Uint8Array, from: number): number {
  for (let i = buf.indexOf(13, from); i >= 0 && i < buf.length - 1; i = buf.indexOf(13, i + 1)) {
    if (buf[i + 1] === 10) return i;
  }
  return -1;
}

/** An LF in buf[from..] not preceded by a CR (at `start` there is nothing before it). */
function hasBareLf(buf: Uint8Array, start: number, from: number): boolean {
  for (let i = buf.indexOf(10, from); i >= 0; i = buf.indexOf(10, i + 1)) {
    if (i === start || buf[i - 1] !== 13) return true;
  }
  return false;
}

/** A CR in buf[from..] followed by anything but an LF (a CR that ends the buffer is not known yet). */
function hasBareCr(buf: Uint8Array, from: number): boolean {
  for (let i = buf.indexOf(13, from); i >= 0 && i < buf.length - 1; i = buf.indexOf(13, i + 1)) {
    if (buf[i + 1] !== 10) return true;
  }
  return false;
}

function indexOfHeadEnd(buf: Uint8Array, from: number): number {
  for (let i = indexOfCrlf(buf, from); i >= 0; i = indexOfCrlf(buf, i + 2)) {
    if (buf[i + 2] === 13 && buf[i + 3] === 10) return i;
  }
  return -1;
}

/**
 * The bytes as latin1 text, one character per byte whatever the byte: a Buffer reads them itself,
 * without asking for its ArrayBuffer. Not `TextDecoder("latin1")`: that is windows-1252 (0x80–0x9F
 * become characters above 0xFF, which `Headers` refuses), so a head would read differently when it
 * arrived in two reads (the carry is a plain array) than in one.
 */
function latin1Text(buf: Uint8Array, start: number, end: number): string {
  return buf instanceof Buffer ? buf.toString("latin1", start, end) : Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength).toString("latin1", start, end);
}

/** buf[start..end] in an array of its own. */
function copyOf(buf: Uint8Array, start: number, end: number): Uint8Array {
  // A plain array, like the views: a Buffer's methods (indexOf, slice) are dearer than Uint8Array's.
  const piece = new Uint8Array(end - start);
  if (buf instanceof Buffer) buf.copy(piece, 0, start, end);
  else piece.set(buf.subarray(start, end));
  return piece;
}

/** A plain view: Buffer's slice/subarray go through its species constructor, several times dearer. */
function view(buf: Uint8Array, at: number, length: number): Uint8Array {
  return new Uint8Array(buf.buffer, buf.byteOffset + at, length);
}
