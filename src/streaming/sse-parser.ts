/**
 * Incremental Server-Sent Events parser (WHATWG HTML "event stream interpretation").
 *
 * Upstream bytes arrive in arbitrary pieces: a frame may be split anywhere, including inside
 * a UTF-8 sequence or between the CR and LF of a CRLF. The parser therefore keeps only three
 * pieces of carried state between chunks: the bytes of a split code point, the unterminated tail line,
 * and whether the previous chunk ended on a CR. Each chunk is scanned once; nothing already
 * seen is rescanned, so a frame trickling in byte by byte costs O(n), not O(n²).
 */

export interface SseEvent {
  /** The `event:` field; undefined when absent or empty (the spec's default "message"). */
  event: string | undefined;
  data: string;
  /** The last event ID in effect at dispatch (it persists across events, as in the spec). */
  id: string | undefined;
  /** A `retry:` value sent within this event's block, if any. */
  retry: number | undefined;
  /**
   * Set when the data came in several `data:` lines (joined with "\n", as the spec says): a
   * relay must not write it back as one line (its second line would reach the client without
   * its `data:`), so such a frame is written anew.
   */
  multiline?: true;
}

export class SseParseError extends Error {
  readonly code: "frame_too_large";

  constructor(message: string) {
    super(message);
    this.name = "SseParseError";
    this.code = "frame_too_large";
  }
}

export interface SseParserOptions {
  onEvent: (event: SseEvent) => void;
  /** Lines starting with ":" (text after the colon, leading single space removed). */
  onComment?: (comment: string) => void;
  /**
   * Cap on one event's accumulated size (unterminated line + data collected so far); default 16 MiB.
   * Counted in UTF-16 code units of decoded text rather than wire bytes: the length is free to
   * read, and for the ASCII-dominated JSON that upstreams send the two are nearly the same.
   */
  maxEventBytes?: number;
}

export interface SseParser {
  /**
   * Throws SseParseError once an event outgrows maxEventBytes; the parser then stays failed until
   * reset(). An exception thrown by a callback also propagates, and the rest of that chunk is lost.
   */
  feed(chunk: Uint8Array | string): void;
  /** Flushes what is pending at end of stream and leaves the parser ready for a new stream. */
  end(): void;
  reset(): void;
}

const DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024;
const LF = 0x0a;
const CR = 0x0d;
const SPACE = 0x20;
const BOM = 0xfeff;

export function createSseParser(options: SseParserOptions): SseParser {
  const { onEvent, onComment } = options;
  const maxEventBytes = options.maxEventBytes ?? DEFAULT_MAX_EVENT_BYTES;
  if (!(maxEventBytes > 0)) throw new RangeError(`maxEventBytes must be positive, got ${maxEventBytes}`);

  // The bytes of a code point split across chunks, held until the rest arrives.
  let carry: Uint8Array | null = null;
  let atStreamStart = true;
  // The unterminated tail line, kept as pieces and joined once when its terminator arrives.
  let pieces: string[] = [];
  let piecesLength = 0;
  // A chunk ended on CR: a LF opening the next chunk belongs to the same line ending.
  let pendingCR = false;

  // Per-block buffers. `data` stays undefined until a data line arrives, which is what
  // separates "no data field" (not dispatched) from "data:" with an empty value (dispatched as "").
  let data: string | undefined;
  let multiline = false;
  let eventType: string | undefined;
  let retry: number | undefined;
  // Persists across events, like the spec's last event ID buffer.
  let lastEventId: string | undefined;

  // Once an event overflows, the stream position is lost; further input must not be parsed as
  // if nothing happened, so every call rethrows until reset().
  let failure: SseParseError | undefined;

  function fail(size: number): never {
    failure = new SseParseError(`SSE event exceeds ${maxEventBytes} code units (reached ${size})`);
    pieces = [];
    piecesLength = 0;
    data = undefined;
    throw failure;
  }

  function dispatch(): void {
    if (data !== undefined) {
      const event: SseEvent = { event: eventType || undefined, data, id: lastEventId || undefined, retry };
      if (multiline) {
        event.multiline = true;
        multiline = false;
      }
      data = undefined;
      eventType = undefined;
      retry = undefined;
      onEvent(event);
      return;
    }
    // A block without data (e.g. only `event:`) dispatches nothing but must not leak into the next.
    multiline = false;
    eventType = undefined;
    retry = undefined;
  }

  function addData(value: string): void {
    const size = data === undefined ? value.length : data.length + 1 + value.length;
    if (size > maxEventBytes) fail(size);
    // String concatenation builds a rope in JSC; multi-line data never copies quadratically.
    if (data === undefined) data = value;
    else {
      data = data + "\n" + value;
      multiline = true;
    }
  }

  function processLine(line: string): void {
    const length = line.length;
    if (length === 0) {
      dispatch();
      return;
    }
    const colon = line.indexOf(":");
    if (colon === 0) {
      if (onComment) onComment(line.charCodeAt(1) === SPACE ? line.slice(2) : line.slice(1));
      return;
    }
    // Field names are matched by length + prefix so the hot path never allocates the name.
    const nameLength = colon === -1 ? length : colon;
    let valueStart = colon === -1 ? length : colon + 1;
    if (valueStart < length && line.charCodeAt(valueStart) === SPACE) valueStart++;

    switch (nameLength) {
      case 4:
        if (line.startsWith("data")) addData(line.slice(valueStart));
        return;
      case 5:
        if (line.startsWith("event")) {
          eventType = line.slice(valueStart);
        } else if (line.startsWith("retry")) {
          const parsed = parseDigits(line, valueStart);
          if (parsed !== undefined) retry = parsed;
        }
        return;
      case 2:
        if (line.startsWith("id")) {
          // The spec ignores ids containing NUL: they could not round-trip through Last-Event-ID.
          if (line.indexOf("\0", valueStart) === -1) lastEventId = line.slice(valueStart);
        }
        return;
      default:
        // Unknown fields are ignored, per spec.
        return;
    }
  }

  function consume(text: string): void {
    const length = text.length;
    if (length === 0) return;
    let pos = 0;
    if (atStreamStart) {
      atStreamStart = false;
      if (text.charCodeAt(0) === BOM) pos = 1;
    }
    if (pendingCR) {
      pendingCR = false;
      if (pos < length && text.charCodeAt(pos) === LF) pos++;
    }

    // Each terminator position is searched for only once it has been passed, so a chunk with
    // no CR at all costs one CR search, not one per line.
    let nextLF = text.indexOf("\n", pos);
    let nextCR = text.indexOf("\r", pos);
    for (;;) {
      if (nextLF !== -1 && nextLF < pos) nextLF = text.indexOf("\n", pos);
      if (nextCR !== -1 && nextCR < pos) nextCR = text.indexOf("\r", pos);
      let end: number;
      if (nextCR === -1) {
        if (nextLF === -1) break;
        end = nextLF;
      } else {
        end = nextLF !== -1 && nextLF < nextCR ? nextLF : nextCR;
      }

      const start = pos;
      if (end === nextCR) {
        if (end + 1 === length) {
          pendingCR = true;
          pos = length;
        } else {
          pos = text.charCodeAt(end + 1) === LF ? end + 2 : end + 1;
        }
      } else {
        pos = end + 1;
      }

      if (pieces.length > 0) {
        pieces.push(text.slice(start, end));
        const line = pieces.join("");
        pieces.length = 0;
        piecesLength = 0;
        processLine(line);
      } else if (end === start) {
        dispatch();
      } else if (text.startsWith("data: ", start)) {
        // The usual line, read straight out of the chunk: no line string to take apart again.
        addData(text.slice(start + 6, end));
      } else {
        processLine(text.slice(start, end));
      }
    }

    if (pos < length) {
      const rest = pos === 0 ? text : text.slice(pos);
      const size = piecesLength + rest.length + (data === undefined ? 0 : data.length);
      if (size > maxEventBytes) fail(size);
      pieces.push(rest);
      piecesLength += rest.length;
    }
  }

  function reset(): void {
    carry = null;
    atStreamStart = true;
    pieces = [];
    piecesLength = 0;
    pendingCR = false;
    data = undefined;
    multiline = false;
    eventType = undefined;
    retry = undefined;
    lastEventId = undefined;
    failure = undefined;
  }

  return {
    feed(chunk) {
      if (failure) throw failure;
      if (typeof chunk === "string") {
        if (carry) {
          // A sequence left incomplete by the bytes before can never complete now: emit U+FFFD.
          consume(UTF8.decode(carry));
          carry = null;
        }
        consume(chunk);
      } else {
        let bytes = chunk;
        if (carry) {
          bytes = Buffer.concat([carry, chunk]);
          carry = null;
        }
        const whole = completeLength(bytes);
        if (whole < bytes.length) {
          carry = bytes.slice(whole);
          bytes = bytes.subarray(0, whole);
        }
        consume(UTF8.decode(bytes));
      }
    },

    end() {
      if (failure) throw failure;
      if (carry) {
        consume(UTF8.decode(carry));
        carry = null;
      }
      if (pieces.length > 0) {
        const line = pieces.join("");
        pieces.length = 0;
        piecesLength = 0;
        processLine(line);
      }
      // The spec discards an event not closed by a blank line. Like openai-node we dispatch it
      // instead: an upstream that drops the final "\n\n" (proxies, abrupt closes after the last
      // chunk) still delivered a complete payload, and losing e.g. the usage frame costs more
      // than forwarding it.
      try {
        if (data !== undefined) dispatch();
      } finally {
        reset();
      }
    },

    reset,
  };
}

/**
 * One decoder for every parser: constructing a TextDecoder costs more than decoding a frame,
 * and a streaming one would be needed per stream. Chunks are cut on code point boundaries
 * instead (see completeLength), so stateless decoding gives the same text. ignoreBOM keeps the
 * BOM in the decoded text so byte and string input share one stripping rule.
 */
const UTF8 = new TextDecoder("utf-8", { ignoreBOM: true });

/**
 * How many leading bytes end on a code point boundary: an incomplete UTF-8 sequence at the
 * end (at most 3 bytes) is left for the next chunk. Anything invalid is left to the decoder,
 * which replaces it with U+FFFD exactly as a streaming decoder would.
 */
export function completeLength(bytes: Uint8Array): number {
  const n = bytes.length;
  let i = n - 1;
  while (i >= 0 && n - i <= 3 && (bytes[i]! & 0xc0) === 0x80) i--;
  if (i < 0 || n - i > 4) return n;
  const lead = bytes[i]!;
  const need = lead >= 0xf0 && lead <= 0xf4 ? 4 : lead >= 0xe0 && lead < 0xf0 ? 3 : lead >= 0xc2 && lead < 0xe0 ? 2 : 1;
  return n - i < need ? i : n;
}

/** The spec accepts `retry` only when the value is ASCII digits; anything else is ignored. */
function parseDigits(line: string, start: number): number | undefined {
  const length = line.length;
  if (start >= length) return undefined;
  let value = 0;
  for (let i = start; i < length; i++) {
    const code = line.charCodeAt(i) - 0x30;
    if (code < 0 || code > 9) return undefined;
    value = value * 10 + code;
  }
  return value;
}
