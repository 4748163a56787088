import { describe, expect, test } from "bun:test";
import { COPY_MAX_BYTES, fieldValue, MAX_HEAD_BYTES, ResponseFramingError, ResponseParser, type ResponseHead } from "../../../../src/transport/http1/response-parser.ts";
import { ResponseTooLargeError } from "../../../../src/transport/transport.ts";

/**
 * The HTTP/1.1 response parser on its own: bytes in, head and body out, with no socket. Every
 * case is also fed one byte at a time, so a split anywhere gives the same result.
 */
interface Outcome {
  head?: ResponseHead;
  heads: number;
  body: string;
  done: boolean;
  reusable: boolean;
  /** After a close of the connection, when asked for. */
  endedByClose?: boolean;
  error?: unknown;
}

function parse(wire: string | Uint8Array, o: { split?: "whole" | "bytes"; close?: boolean; method?: string; max?: number } = {}): Outcome {
  const bytes = typeof wire === "string" ? Buffer.from(wire, "latin1") : wire;
  const out: Outcome = { heads: 0, body: "", done: false, reusable: false, error: undefined };
  const body: Uint8Array[] = [];
  const parser = new ResponseParser(o.method ?? "POST", {
    head(head) {
      out.head = head;
      out.heads++;
    },
    body(piece) {
      // Copies: the parser hands out views into the buffer it was given.
      body.push(Uint8Array.from(piece));
    },
  }, o.max);
  try {
    // Copies: the parser may move bytes within what it is given (each socket read is its own buffer).
    if (o.split === "bytes") for (let i = 0; i < bytes.length; i++) parser.push(Uint8Array.from(bytes.subarray(i, i + 1)));
    else parser.push(Uint8Array.from(bytes));
    if (o.close) out.endedByClose = parser.close();
  } catch (err) {
    out.error = err;
  }
  out.body = Buffer.concat(body).toString("latin1");
  out.done = parser.done;
  out.reusable = parser.reusable;
  return out;
}

/** Both ways of feeding the bytes must agree; returns the whole-buffer outcome. */
function parseBothWays(wire: string, o: Parameters<typeof parse>[1] = {}): Outcome {
  const whole = parse(wire, { ...o, split: "whole" });
  const bytes = parse(wire, { ...o, split: "bytes" });
  // The head too: a head cut across reads is read from the parser's carry, not the read's buffer.
  const headOf = (o: Outcome) => o.head && { status: o.head.status, statusText: o.head.statusText, fields: o.head.fields };
  expect({ ...bytes, head: headOf(bytes) }).toEqual({ ...whole, head: headOf(whole) });
  return whole;
}

const CHUNKED = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\nA;x=y\r\n0123456789\r\n0\r\nx-trailer: 1\r\n\r\n";

describe("response parser: well-formed answers", () => {
  test("every split point of a chunked answer gives the same head and body", () => {
    const bytes = Buffer.from(CHUNKED);
    for (let cut = 1; cut < bytes.length; cut++) {
      const body: Uint8Array[] = [];
      let status = 0;
      const parser = new ResponseParser("POST", { head: (h) => (status = h.status), body: (b) => body.push(Uint8Array.from(b)) });
      parser.push(Uint8Array.from(bytes.subarray(0, cut)));
      parser.push(Uint8Array.from(bytes.subarray(cut)));
      expect(status).toBe(200);
      expect(Buffer.concat(body).toString()).toBe("abcd0123456789");
      expect(parser.done).toBe(true);
      expect(parser.reusable).toBe(true);
    }
  });

  test("in three pieces cut anywhere, body pieces kept as given (views) stay intact", () => {
    // Unfinished heads and chunk lines are carried between pushes in a reused buffer; the body
    // views handed out must never be overwritten by what is carried later.
    const wire = Buffer.from(`HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n4\r\ndefg\r\n2;x\r\nhi\r\n0\r\n\r\n`);
    for (let a = 1; a < wire.length; a++) {
      for (let b = a + 1; b < wire.length; b++) {
        const body: Uint8Array[] = [];
        const parser = new ResponseParser("POST", { head() {}, body: (piece) => body.push(piece) });
        for (const piece of [wire.subarray(0, a), wire.subarray(a, b), wire.subarray(b)]) parser.push(Uint8Array.from(piece));
        expect(Buffer.concat(body).toString()).toBe("abcdefghi");
        expect(parser.reusable).toBe(true);
      }
    }
  });

  test("a small Content-Length body is copied out of the socket's buffer; a large one is a view into it", () => {
    const answer = (body: string) => Buffer.from(`HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    const read = (wire: Buffer) => {
      const pieces: Uint8Array[] = [];
      new ResponseParser("POST", { head() {}, body: (piece) => pieces.push(piece) }).push(wire);
      expect(pieces.length).toBe(1);
      return pieces[0]!;
    };
    const small = answer('{"ok":true}');
    const copied = read(small);
    expect(Buffer.from(copied).toString()).toBe('{"ok":true}');
    expect(copied.buffer).not.toBe(small.buffer);
    expect(copied).not.toBeInstanceOf(Buffer);
    const large = answer("x".repeat(COPY_MAX_BYTES + 1));
    const viewed = read(large);
    expect(viewed.buffer).toBe(large.buffer);
    expect(viewed.byteLength).toBe(COPY_MAX_BYTES + 1);
  });

  test("a chunked burst in one read is one body piece, moved together over the framing in the buffer it came in", () => {
    const pieces: Uint8Array[] = [];
    const parser = new ResponseParser("POST", { head() {}, body: (piece) => pieces.push(piece) });
    const wire = Buffer.from(CHUNKED);
    parser.push(wire);
    expect(pieces.length).toBe(1);
    expect(Buffer.from(pieces[0]!).toString()).toBe("abcd0123456789");
    expect(pieces[0]!.buffer).toBe(wire.buffer);
    // Split across reads: one piece per read that holds body bytes.
    const split: Uint8Array[] = [];
    const second = new ResponseParser("POST", { head() {}, body: (piece) => split.push(Uint8Array.from(piece)) });
    const cut = CHUNKED.indexOf("0123");
    second.push(Buffer.from(CHUNKED.slice(0, cut)));
    second.push(Buffer.from(CHUNKED.slice(cut)));
    expect(split.map((p) => Buffer.from(p).toString())).toEqual(["abcd", "0123456789"]);
  });

  test("fed one byte at a time: chunked, Content-Length, 204, 100 Continue", () => {
    const chunked = parseBothWays(CHUNKED);
    expect(chunked).toMatchObject({ body: "abcd0123456789", done: true, reusable: true, heads: 1 });
    expect(fieldValue(chunked.head!.fields, "transfer-encoding")).toBeNull();
    expect(parseBothWays("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")).toMatchObject({ body: "hello", done: true, reusable: true });
    expect(parseBothWays("HTTP/1.1 204 No Content\r\n\r\n")).toMatchObject({ body: "", done: true, reusable: true });
    const continued = parseBothWays("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}");
    expect(continued).toMatchObject({ body: "{}", done: true, reusable: true, heads: 1 });
    expect(continued.head!.status).toBe(201);
    expect(continued.head!.statusText).toBe("Created");
  });

  test("header bytes 0x80–0xFF read as one latin1 character each, in one read or cut across reads", () => {
    // windows-1252 (what TextDecoder calls latin1) would turn 0x80–0x9F into characters Headers refuses.
    const high = Array.from({ length: 128 }, (_, i) => String.fromCharCode(0x80 + i)).join("");
    const out = parseBothWays(`HTTP/1.1 200 OK\r\nx-high: a${high}z\r\nX-Note: caf\u00e9 \u00e2\u0080\u0099\r\ncontent-length: 0\r\n\r\n`);
    expect(out.error).toBeUndefined();
    expect(fieldValue(out.head!.fields, "x-high")).toBe(`a${high}z`);
    // The UTF-8 bytes of ’ (E2 80 99) as sent, one character each.
    expect(fieldValue(out.head!.fields, "x-note")).toBe("caf\u00e9 \u00e2\u0080\u0099");
    expect(new Headers([["x-high", fieldValue(out.head!.fields, "x-high")!]]).get("x-high")).toBe(`a${high}z`);
  });

  test("a body delimited by close ends only at the close, and its connection is not reusable", () => {
    const open = parseBothWays("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nhello");
    expect(open).toMatchObject({ body: "hello", done: false });
    expect(parseBothWays("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nhello", { close: true })).toMatchObject({ body: "hello", done: true, endedByClose: true, reusable: false });
  });

  test("a close before the end of a framed answer does not end it", () => {
    expect(parseBothWays("HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello", { close: true })).toMatchObject({ done: false, endedByClose: false });
    expect(parseBothWays("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n", { close: true })).toMatchObject({ done: false, endedByClose: false });
  });

  test("a HEAD answer has no body whatever its length says", () => {
    expect(parseBothWays("HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n", { method: "HEAD" })).toMatchObject({ done: true, reusable: true, body: "" });
  });

  test("chunk sizes with leading zeros (RFC 9112 allows them) are their size: the zeros do not count toward the 8-digit cap", () => {
    expect(parseBothWays("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n000000000a\r\n0123456789\r\n00000\r\n\r\n")).toMatchObject({ body: "0123456789", done: true, reusable: true });
    // Nine significant digits are still too large, and a run of zeros past reason is refused.
    expect(parseBothWays("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n00100000000\r\n").error).toBeDefined();
    expect(parseBothWays(`HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n${"0".repeat(100)}5\r\nhello\r\n0\r\n\r\n`).error).toBeDefined();
  });

  test("repeated Content-Length values that agree are one length", () => {
    expect(parseBothWays("HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 2\r\n\r\n{}")).toMatchObject({ body: "{}", done: true, reusable: true });
  });
});

describe("response parser: what makes the connection not reusable", () => {
  const cases: [string, string][] = [
    ["Connection: close", "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}"],
    ["HTTP/1.0, even with keep-alive", "HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\n{}"],
    ["bytes after the end of a Content-Length body", "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}HTTP/1.1 200 OK\r\n"],
    ["a second answer after a chunked one", `${CHUNKED}HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}`],
    ["a body longer than its Content-Length", "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}}"],
    ["bytes after a 204", "HTTP/1.1 204 No Content\r\n\r\nxyz"],
    ["an interim answer other than 100", "HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"],
  ];
  for (const [name, wire] of cases) {
    test(name, () => {
      const outcome = parseBothWays(wire);
      expect(outcome.error).toBeUndefined();
      expect(outcome.done).toBe(true);
      expect(outcome.reusable).toBe(false);
    });
  }
});

describe("response parser: framing faults are errors", () => {
  const faults: [string, string][] = [
    ["a status line that is not HTTP/1.x", "HTTP/2 200\r\n\r\n"],
    ["garbage instead of a status line", "hello there\r\n\r\n"],
    ["a three-digit status out of range", "HTTP/1.1 600 Nope\r\ncontent-length: 0\r\n\r\n"],
    ["a header line without a colon", "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n"],
    ["a folded header line", "HTTP/1.1 200 OK\r\nx-a: 1\r\n folded\r\ncontent-length: 0\r\n\r\n"],
    ["a space before the colon", "HTTP/1.1 200 OK\r\ncontent-length : 2\r\n\r\n{}"],
    ["a bare LF inside a header value", "HTTP/1.1 200 OK\r\nx-a: 1\nx-b: 2\r\ncontent-length: 0\r\n\r\n"],
    ["a Content-Length that is not a number", "HTTP/1.1 200 OK\r\ncontent-length: twelve\r\n\r\n"],
    ["a negative Content-Length", "HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n"],
    ["Content-Length values that disagree", "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}"],
    ["both Content-Length and Transfer-Encoding", "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"],
    ["a transfer coding other than chunked", "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n"],
    ["an unknown transfer coding alone", "HTTP/1.1 200 OK\r\ntransfer-encoding: identity\r\n\r\nabc"],
    ["a chunk size that is not hex", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n"],
    ["an empty chunk size", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\r\nabc\r\n"],
    ["a chunk size with trailing junk", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3 x\r\nabc\r\n"],
    ["a chunk size of more than 8 hex digits", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n123456789\r\n"],
    ["chunk data longer than its size", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabcd\r\n0\r\n\r\n"],
    ["a chunk size line without end", `HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;${"x".repeat(2000)}`],
    ["a 101 protocol switch", "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n"],
    ["a head without end", `HTTP/1.1 200 OK\r\n${"x-pad: yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\r\n".repeat(MAX_HEAD_BYTES / 40)}`],
    ["endless interim answers", "HTTP/1.1 100 Continue\r\n\r\n".repeat(MAX_HEAD_BYTES / 20)],
    ["endless trailers", `HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n${"x-t: 1\r\n".repeat(MAX_HEAD_BYTES / 8 + 1)}`],
    // These never end in CRLF CRLF: refused as they come, not at the first-byte limit.
    ["a head with LF line endings (its end not arrived)", "HTTP/1.1 200 OK\ncontent-type: application/json\ncontent-length: 2\n\n{}"],
    ["a head that starts with a bare LF", "\nHTTP/1.1 200 OK\r\n"],
    ["chunk size lines ended by bare LFs (their end not arrived)", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\nhello\n0\n\n"],
    ["a chunk size line ended by a bare LF after a chunk", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\n"],
    ["a trailer line ended by a bare LF", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nx-t: 1\n"],
    ["the empty line after the last chunk a bare LF", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\n"],
    // Bare CRs (old Mac line ends) never end in CRLF CRLF either, and a JSON body has no LF to give them away.
    ["a head with bare CR line endings (its end not arrived)", 'HTTP/1.1 200 OK\rcontent-type: application/json\rcontent-length: 2\r\r{"a":1}'],
    ["a bare CR inside the head before its end", "HTTP/1.1 200 OK\r\nx-a: 1\rx-b: 2"],
    ["chunk size lines ended by bare CRs (their end not arrived)", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\rhello\r0\r\r"],
    ["a trailer line ended by a bare CR", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nx-t: 1\rx"],
    // Not HTTP/1 at all, said at its first byte rather than at the first-byte limit (a raw-TCP probe):
    // an HTTP/2 server's SETTINGS frame (an http:// base URL on an h2c-only server), TLS on a plain port.
    ["an HTTP/2 SETTINGS frame", "\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x64"],
    ["a TLS alert", "\x15\x03\x01\x00\x02\x02\x46"],
    ["lowercase http", "http/1.1 200 OK\r\n"],
  ];
  for (const [name, wire] of faults) {
    test(name, () => {
      const whole = parse(wire);
      const bytes = parse(wire, { split: "bytes" });
      expect(whole.error).toBeInstanceOf(ResponseFramingError);
      expect(bytes.error).toBeInstanceOf(ResponseFramingError);
      expect(whole.reusable).toBe(false);
    });
  }
});

describe("response parser: the size cap", () => {
  test("an announced length over the cap fails at the head, before any body", () => {
    const outcome = parse("HTTP/1.1 200 OK\r\ncontent-length: 1001\r\n\r\nxx", { max: 1000 });
    expect(outcome.error).toBeInstanceOf(ResponseTooLargeError);
    expect(outcome.heads).toBe(0);
    expect(outcome.body).toBe("");
  });

  test("a chunk that would pass the cap fails at its size line, before its data", () => {
    const wire = `HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n200\r\n${"a".repeat(512)}\r\n300\r\n${"b".repeat(768)}\r\n0\r\n\r\n`;
    for (const split of ["whole", "bytes"] as const) {
      const outcome = parse(wire, { max: 1000, split });
      expect(outcome.error).toBeInstanceOf(ResponseTooLargeError);
      expect(outcome.body).toBe("a".repeat(512));
    }
    expect(parse(wire, { max: 1280 })).toMatchObject({ done: true, error: undefined });
  });

  test("a body delimited by close fails once it passes the cap", () => {
    const outcome = parse(`HTTP/1.1 200 OK\r\n\r\n${"x".repeat(1001)}`, { max: 1000 });
    expect(outcome.error).toBeInstanceOf(ResponseTooLargeError);
    expect(parse(`HTTP/1.1 200 OK\r\n\r\n${"x".repeat(1000)}`, { max: 1000, close: true })).toMatchObject({ done: true, error: undefined });
  });

  test("exactly at the cap is accepted", () => {
    expect(parse(`HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n${"x".repeat(1000)}`, { max: 1000 })).toMatchObject({ done: true, reusable: true, error: undefined });
  });
});
