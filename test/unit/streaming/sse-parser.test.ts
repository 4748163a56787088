import { describe, expect, test } from "bun:test";
import { createSseParser, SseParseError } from "../../../src/streaming/sse-parser.ts";
import type { SseEvent, SseParserOptions } from "../../../src/streaming/sse-parser.ts";

const utf8 = new TextEncoder();

interface Collected {
  events: SseEvent[];
  comments: string[];
}

/** Feeds the chunks in order, then end(), and returns everything the callbacks saw. */
function collect(chunks: Iterable<Uint8Array | string>, options: Partial<SseParserOptions> = {}): Collected {
  const events: SseEvent[] = [];
  const comments: string[] = [];
  const parser = createSseParser({
    ...options,
    onEvent: (e) => events.push(e),
    onComment: (c) => comments.push(c),
  });
  for (const chunk of chunks) parser.feed(chunk);
  parser.end();
  return { events, comments };
}

function ev(data: string, extra: Partial<SseEvent> = {}): SseEvent {
  // Data that holds a line break came in several `data:` lines, which the event says (relays re-split it).
  return { event: undefined, data, id: undefined, retry: undefined, ...(data.includes("\n") ? { multiline: true as const } : {}), ...extra };
}

function* byteByByte(bytes: Uint8Array): Generator<Uint8Array> {
  for (let i = 0; i < bytes.length; i++) yield bytes.subarray(i, i + 1);
}

/** Deterministic chunk sizes 1..maxSize, so a failure reproduces. */
function* randomChunks(bytes: Uint8Array, seed: number, maxSize: number): Generator<Uint8Array> {
  let state = seed >>> 0;
  let pos = 0;
  while (pos < bytes.length) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    const size = 1 + (state % maxSize);
    yield bytes.subarray(pos, pos + size);
    pos += size;
  }
}

// ---------------------------------------------------------------------------------------------
// Realistic fixtures, built inline so this file stands alone.

function openAiChunk(delta: Record<string, unknown>, finishReason: string | null = null, usage?: unknown): string {
  return JSON.stringify({
    id: "chatcmpl-9xYzAbC123",
    object: "chat.completion.chunk",
    created: 1_718_000_000,
    model: "gpt-4o-mini-2024-07-18",
    system_fingerprint: "fp_0123456789",
    choices: usage ? [] : [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
    ...(usage ? { usage } : {}),
  });
}

const openAiPayloads = [
  openAiChunk({ role: "assistant", content: "", refusal: null }),
  openAiChunk({ content: "Hello" }),
  openAiChunk({ content: ", wörld 👋🏽" }),
  openAiChunk({ content: " — 你好，世界" }),
  openAiChunk({ content: "! naïve café ✓" }),
  openAiChunk({}, "stop"),
  openAiChunk({}, null, { prompt_tokens: 12, completion_tokens: 9, total_tokens: 21 }),
  "[DONE]",
];
const openAiStream = openAiPayloads.map((p) => `data: ${p}\n\n`).join("");
const openAiExpected: Collected = { events: openAiPayloads.map((p) => ev(p)), comments: [] };

const anthropicFrames: Array<[string, unknown]> = [
  [
    "message_start",
    {
      type: "message_start",
      message: {
        id: "msg_01XFDUDYJgAACzvnptvVoYEL",
        type: "message",
        role: "assistant",
        content: [],
        model: "claude-sonnet-4-5",
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: 25, output_tokens: 1 },
      },
    },
  ],
  ["content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }],
  ["ping", { type: "ping" }],
  ["content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Bonjour 🌍" } }],
  ["content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: " — こんにちは!" } }],
  ["content_block_stop", { type: "content_block_stop", index: 0 }],
  [
    "message_delta",
    { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 15 } },
  ],
  ["message_stop", { type: "message_stop" }],
];
const anthropicStream = anthropicFrames.map(([name, body]) => `event: ${name}\ndata: ${JSON.stringify(body)}\n\n`).join("");
const anthropicExpected: Collected = {
  events: anthropicFrames.map(([name, body]) => ev(JSON.stringify(body), { event: name })),
  comments: [],
};

const crlfStream = [
  ": keep-alive\r\n\r\n",
  "retry: 3000\r\nid: 1\r\ndata: first line\r\ndata: second line\r\n\r\n",
  ": keep-alive\r\n\r\n",
  'event: update\r\nid: 2\r\ndata: {"n":2,"s":"é✓ 🚀"}\r\n\r\n',
  ":keep-alive\r\n",
  "data:no-space\r\n\r\n",
  ": keep-alive\r\n\r\n",
  "data: [DONE]\r\n\r\n",
].join("");
const crlfExpected: Collected = {
  events: [
    ev("first line\nsecond line", { id: "1", retry: 3000 }),
    ev('{"n":2,"s":"é✓ 🚀"}', { event: "update", id: "2" }),
    ev("no-space", { id: "2" }),
    ev("[DONE]", { id: "2" }),
  ],
  comments: ["keep-alive", "keep-alive", "keep-alive", "keep-alive"],
};

const fixtures: Array<[string, string, Collected]> = [
  ["OpenAI chat.completion.chunk stream", openAiStream, openAiExpected],
  ["Anthropic messages stream", anthropicStream, anthropicExpected],
  ["CRLF stream with keep-alive comments", crlfStream, crlfExpected],
];

// ---------------------------------------------------------------------------------------------

describe("line endings", () => {
  test("LF", () => {
    expect(collect(["data: a\n\ndata: b\n\n"]).events).toEqual([ev("a"), ev("b")]);
  });

  test("CR", () => {
    expect(collect(["data: a\r\rdata: b\r\r"]).events).toEqual([ev("a"), ev("b")]);
  });

  test("CRLF", () => {
    expect(collect(["data: a\r\n\r\ndata: b\r\n\r\n"]).events).toEqual([ev("a"), ev("b")]);
  });

  test("mixed endings in one stream", () => {
    expect(collect(["data: a\rdata: b\ndata: c\r\n\ndata: d\n\r\n"]).events).toEqual([ev("a\nb\nc"), ev("d")]);
  });

  test("CRLF split across two chunks is one line ending", () => {
    // Were the split CRLF read as two endings, the empty line between would dispatch "a" alone.
    expect(collect(["data: a\r", "\ndata: b\r\n\r\n"]).events).toEqual([ev("a\nb")]);
    expect(collect([utf8.encode("data: a\r"), utf8.encode("\ndata: b\r"), utf8.encode("\n\r"), utf8.encode("\n")]).events).toEqual([
      ev("a\nb"),
    ]);
  });

  test("a CR at chunk end survives an empty chunk before its LF", () => {
    expect(collect(["data: a\r", "", new Uint8Array(0), "\n", "\n"]).events).toEqual([ev("a")]);
  });

  test("a CR at chunk end followed by something other than LF ends the line by itself", () => {
    expect(collect(["data: a\r", "data: b\r", "\r"]).events).toEqual([ev("a\nb")]);
  });

  test("several events in one chunk are dispatched in order during feed", () => {
    const seen: string[] = [];
    const parser = createSseParser({ onEvent: (e) => seen.push(e.data) });
    parser.feed("data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4");
    expect(seen).toEqual(["1", "2", "3"]);
    parser.feed("\n\n");
    expect(seen).toEqual(["1", "2", "3", "4"]);
  });
});

describe("fields", () => {
  test("multi-line data is joined with LF", () => {
    expect(collect(["data: line one\ndata: line two\ndata: line three\n\n"]).events).toEqual([
      ev("line one\nline two\nline three"),
    ]);
  });

  test("comments go to onComment with one leading space removed and never dispatch", () => {
    const { events, comments } = collect([": keep-alive\n:\n:  two spaces\n:no-space\n\ndata: x\n: inside\n\n"]);
    expect(comments).toEqual(["keep-alive", "", " two spaces", "no-space", "inside"]);
    expect(events).toEqual([ev("x")]);
  });

  test("comments without an onComment handler are skipped", () => {
    const events: SseEvent[] = [];
    const parser = createSseParser({ onEvent: (e) => events.push(e) });
    parser.feed(": ping\n\ndata: x\n\n");
    expect(events).toEqual([ev("x")]);
  });

  test("event, id and retry", () => {
    expect(collect(["event: delta\nid: 42\nretry: 1500\ndata: {}\n\n"]).events).toEqual([
      ev("{}", { event: "delta", id: "42", retry: 1500 }),
    ]);
  });

  test("event type and retry reset after each event; id persists like the spec's last event ID", () => {
    const { events } = collect(["event: a\nid: 7\nretry: 10\ndata: 1\n\ndata: 2\n\nid: 8\ndata: 3\n\n"]);
    expect(events).toEqual([ev("1", { event: "a", id: "7", retry: 10 }), ev("2", { id: "7" }), ev("3", { id: "8" })]);
  });

  test("an id containing NUL is ignored", () => {
    const { events } = collect(["id: good\ndata: 1\n\nid: ba\0d\ndata: 2\n\n"]);
    expect(events).toEqual([ev("1", { id: "good" }), ev("2", { id: "good" })]);
  });

  test("an empty id clears the last event ID", () => {
    const { events } = collect(["id: 5\ndata: 1\n\nid:\ndata: 2\n\n"]);
    expect(events).toEqual([ev("1", { id: "5" }), ev("2")]);
  });

  test("retry accepts ASCII digits only", () => {
    const { events } = collect([
      "retry: 12a\ndata: 1\n\nretry:\ndata: 2\n\nretry: -5\ndata: 3\n\nretry:  7\ndata: 4\n\nretry: 0\ndata: 5\n\nretry: 250\nretry: x\ndata: 6\n\n",
    ]);
    expect(events.map((e) => e.retry)).toEqual([undefined, undefined, undefined, undefined, 0, 250]);
  });

  test("a field line without a colon is a field name with an empty value", () => {
    expect(collect(["data\n\n"]).events).toEqual([ev("")]);
    expect(collect(["data: a\ndata\ndata: b\n\n"]).events).toEqual([ev("a\n\nb")]);
    expect(collect(["event: x\nevent\ndata: y\n\n"]).events).toEqual([ev("y")]);
    expect(collect(["id: 3\ndata: 1\n\nid\ndata: 2\n\n"]).events).toEqual([ev("1", { id: "3" }), ev("2")]);
  });

  test("only one leading space after the colon is removed", () => {
    expect(collect(["data:  two spaces\n\n"]).events).toEqual([ev(" two spaces")]);
    expect(collect(["data:\ttab\n\n"]).events).toEqual([ev("\ttab")]);
    expect(collect(["data: trailing \n\n"]).events).toEqual([ev("trailing ")]);
    expect(collect(["event:  spaced\ndata: x\n\n"]).events).toEqual([ev("x", { event: " spaced" })]);
  });

  test("data: with no space", () => {
    expect(collect(["data:x\n\n"]).events).toEqual([ev("x")]);
    expect(collect(["data:{\"a\":1}\n\n"]).events).toEqual([ev('{"a":1}')]);
  });

  test("an empty data line dispatches an empty string", () => {
    expect(collect(["data:\n\n"]).events).toEqual([ev("")]);
    expect(collect(["data: \n\n"]).events).toEqual([ev("")]);
    expect(collect(["data: a\ndata:\ndata: b\n\n"]).events).toEqual([ev("a\n\nb")]);
  });

  test("a block without data is not dispatched and its event type does not leak", () => {
    expect(collect(["event: lonely\n\ndata: x\n\n"]).events).toEqual([ev("x")]);
    expect(collect(["retry: 5\n\ndata: x\n\n"]).events).toEqual([ev("x")]);
    expect(collect(["\n\n\n\n"]).events).toEqual([]);
  });

  test("an id-only block still sets the id for later events", () => {
    expect(collect(["id: 9\n\ndata: x\n\n"]).events).toEqual([ev("x", { id: "9" })]);
  });

  test("unknown and case-mismatched fields are ignored", () => {
    expect(collect(["foo: bar\nDATA: no\nData: no\ndatum: no\nevents: no\nidx: no\ndata: yes\n\n"]).events).toEqual([ev("yes")]);
  });

  test("a colon in the value is kept", () => {
    expect(collect(["data: a:b: c\n\n"]).events).toEqual([ev("a:b: c")]);
  });
});

describe("encoding", () => {
  test("a leading BOM is stripped", () => {
    const bytes = utf8.encode("\uFEFFdata: x\n\n");
    expect(bytes[0]).toBe(0xef);
    expect(collect([bytes]).events).toEqual([ev("x")]);
    expect(collect(["\uFEFFdata: x\n\n"]).events).toEqual([ev("x")]);
  });

  test("a BOM split across byte chunks is stripped", () => {
    const bytes = utf8.encode("\uFEFFdata: x\n\n");
    expect(collect(byteByByte(bytes)).events).toEqual([ev("x")]);
    expect(collect([new Uint8Array(0), bytes.subarray(0, 2), bytes.subarray(2)]).events).toEqual([ev("x")]);
  });

  test("only one BOM, only at stream start, is stripped", () => {
    // A second BOM becomes part of the field name, which is then unknown.
    expect(collect(["\uFEFF\uFEFFdata: x\n\n"]).events).toEqual([]);
    expect(collect(["data: \uFEFFx\n\n"]).events).toEqual([ev("\uFEFFx")]);
    expect(collect(["data: a\n\n", "\uFEFFdata: b\n\n"]).events).toEqual([ev("a")]);
  });

  test("multibyte UTF-8 split at every byte offset", () => {
    const text = "data: 😀 中文 ✓ é 𝄞 👋🏽\n\n";
    const bytes = utf8.encode(text);
    for (let i = 0; i <= bytes.length; i++) {
      const got = collect([bytes.subarray(0, i), bytes.subarray(i)]).events;
      expect(got).toEqual([ev("😀 中文 ✓ é 𝄞 👋🏽")]);
    }
    expect(collect(byteByByte(bytes)).events).toEqual([ev("😀 中文 ✓ é 𝄞 👋🏽")]);
  });

  test("multibyte UTF-8 split into three chunks at every pair of offsets", () => {
    const bytes = utf8.encode("data: 𝄞中\n\n");
    for (let i = 0; i <= bytes.length; i++) {
      for (let j = i; j <= bytes.length; j++) {
        const got = collect([bytes.subarray(0, i), bytes.subarray(i, j), bytes.subarray(j)]).events;
        expect(got).toEqual([ev("𝄞中")]);
      }
    }
  });

  test("invalid UTF-8 split anywhere decodes exactly as a streaming TextDecoder would", () => {
    // Lone lead and continuation bytes, an overlong form, a surrogate, a sequence cut short, all mid-frame.
    const bytes = Buffer.concat([
      utf8.encode("data: a€"), Buffer.from([0xff, 0x80]), utf8.encode("😀"), Buffer.from([0xe2, 0x82]), utf8.encode("c"),
      Buffer.from([0xc0, 0x80, 0xed, 0xa0, 0x80, 0xf0, 0x9f]), utf8.encode("d\n\n"),
    ]);
    const reference = new TextDecoder("utf-8", { ignoreBOM: true }).decode(bytes).slice("data: ".length, -2);
    expect(reference).toContain("\uFFFD");
    for (let i = 0; i <= bytes.length; i++) {
      for (const j of [i, Math.min(bytes.length, i + 1), Math.min(bytes.length, i + 2)]) {
        const got = collect([bytes.subarray(0, i), bytes.subarray(i, j), bytes.subarray(j)]).events;
        if (!Bun.deepEquals(got, [ev(reference)])) expect({ i, j, got }).toEqual({ i, j, got: [ev(reference)] });
      }
    }
  });

  test("strings and bytes may be mixed", () => {
    expect(collect(["data: a", utf8.encode("b\ndata: ✓"), "\n\n"]).events).toEqual([ev("ab\n✓")]);
  });

  test("a UTF-8 sequence left incomplete at end becomes U+FFFD", () => {
    const partial = utf8.encode("data: x😀").subarray(0, -2);
    expect(collect([partial]).events).toEqual([ev("x\uFFFD")]);
  });
});

describe("end()", () => {
  test("dispatches a final event that lacks the blank line (lenient, like openai-node)", () => {
    expect(collect(["data: a\n\ndata: b"]).events).toEqual([ev("a"), ev("b")]);
    expect(collect(["data: a\n\ndata: b\n"]).events).toEqual([ev("a"), ev("b")]);
    expect(collect(["data: a\n\ndata: b\r"]).events).toEqual([ev("a"), ev("b")]);
    expect(collect(["event: last\ndata: b\ndata: c"]).events).toEqual([ev("b\nc", { event: "last" })]);
  });

  test("does not dispatch twice or invent events", () => {
    expect(collect(["data: a\n\n"]).events).toEqual([ev("a")]);
    expect(collect([]).events).toEqual([]);
    expect(collect(["event: only\nid: 1"]).events).toEqual([]);
    expect(collect([": just a comment"]).comments).toEqual(["just a comment"]);
  });

  test("leaves the parser ready for a fresh stream", () => {
    const events: SseEvent[] = [];
    const parser = createSseParser({ onEvent: (e) => events.push(e) });
    parser.feed("id: 1\nevent: x\ndata: first");
    parser.end();
    parser.feed("\uFEFFdata: second\n\n");
    parser.end();
    expect(events).toEqual([ev("first", { id: "1", event: "x" }), ev("second")]);
  });

  test("reset() discards pending state", () => {
    const events: SseEvent[] = [];
    const parser = createSseParser({ onEvent: (e) => events.push(e) });
    parser.feed("id: 1\ndata: lost\ndata: partial li");
    parser.reset();
    parser.feed("data: kept\n\n");
    parser.end();
    expect(events).toEqual([ev("kept")]);
  });
});

describe("maxEventBytes", () => {
  test("a single oversized line throws frame_too_large from feed", () => {
    const parser = createSseParser({ onEvent: () => {}, maxEventBytes: 100 });
    let error: unknown;
    try {
      parser.feed(`data: ${"x".repeat(200)}\n\n`);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(SseParseError);
    expect(error).toBeInstanceOf(Error);
    expect((error as SseParseError).code).toBe("frame_too_large");
    expect((error as SseParseError).name).toBe("SseParseError");
  });

  test("data accumulated over many lines counts", () => {
    const parser = createSseParser({ onEvent: () => {}, maxEventBytes: 50 });
    parser.feed("data: 0123456789\n".repeat(4));
    expect(() => parser.feed("data: 0123456789\n")).toThrow(SseParseError);
  });

  test("an unterminated line growing over small chunks throws before the newline arrives", () => {
    const parser = createSseParser({ onEvent: () => {}, maxEventBytes: 1000 });
    parser.feed("data: ");
    let thrownAt = -1;
    for (let i = 0; i < 2000; i++) {
      try {
        parser.feed("y");
      } catch (e) {
        expect(e).toBeInstanceOf(SseParseError);
        thrownAt = i;
        break;
      }
    }
    expect(thrownAt).toBe(1000 - "data: ".length);
  });

  test("pending line and accumulated data count together", () => {
    const parser = createSseParser({ onEvent: () => {}, maxEventBytes: 30 });
    parser.feed("data: 0123456789\n"); // 10 of data
    parser.feed("data: 01234567"); // + 14 pending = 24
    expect(() => parser.feed("89012345")).toThrow(SseParseError); // 32
  });

  test("an event exactly at the limit passes; one unit more fails", () => {
    const ok: SseEvent[] = [];
    const atLimit = createSseParser({ onEvent: (e) => ok.push(e), maxEventBytes: 16 });
    atLimit.feed("data: 0123456789"); // 16 code units pending
    atLimit.feed("\n\n");
    atLimit.end();
    expect(ok).toEqual([ev("0123456789")]);

    const over = createSseParser({ onEvent: () => {}, maxEventBytes: 15 });
    expect(() => over.feed("data: 0123456789")).toThrow(SseParseError);
  });

  test("the limit is per event, not per stream", () => {
    const events: SseEvent[] = [];
    const parser = createSseParser({ onEvent: (e) => events.push(e), maxEventBytes: 40 });
    for (let i = 0; i < 100; i++) parser.feed(`data: event number ${i}\n\n`);
    parser.end();
    expect(events).toHaveLength(100);
  });

  test("after an overflow the parser keeps failing until reset", () => {
    const events: SseEvent[] = [];
    const parser = createSseParser({ onEvent: (e) => events.push(e), maxEventBytes: 20 });
    expect(() => parser.feed(`data: ${"z".repeat(50)}`)).toThrow(SseParseError);
    expect(() => parser.feed("\n\ndata: fine\n\n")).toThrow(SseParseError);
    expect(() => parser.end()).toThrow(SseParseError);
    parser.reset();
    parser.feed("data: fine\n\n");
    parser.end();
    expect(events).toEqual([ev("fine")]);
  });

  test("the default limit is 16 MiB", () => {
    const parser = createSseParser({ onEvent: () => {} });
    const mib = "m".repeat(1024 * 1024);
    parser.feed("data: ");
    for (let i = 0; i < 15; i++) parser.feed(mib);
    expect(() => parser.feed(mib)).toThrow(SseParseError);
  });

  test("a non-positive limit is rejected", () => {
    expect(() => createSseParser({ onEvent: () => {}, maxEventBytes: 0 })).toThrow(RangeError);
    expect(() => createSseParser({ onEvent: () => {}, maxEventBytes: Number.NaN })).toThrow(RangeError);
  });
});

describe("chunking does not change the result", () => {
  for (const [name, text, expected] of fixtures) {
    describe(name, () => {
      const bytes = utf8.encode(text);

      test("whole stream parses to the expected events", () => {
        expect(collect([bytes])).toEqual(expected);
        expect(collect([text])).toEqual(expected);
      });

      test("split into two chunks at every byte offset", () => {
        const whole = collect([bytes]);
        for (let i = 0; i <= bytes.length; i++) {
          const split = collect([bytes.subarray(0, i), bytes.subarray(i)]);
          if (!Bun.deepEquals(split, whole)) expect({ offset: i, ...split }).toEqual({ offset: i, ...whole });
        }
      });

      test("byte by byte", () => {
        expect(collect(byteByByte(bytes))).toEqual(collect([bytes]));
      });

      test("split into two string chunks at every character offset", () => {
        const whole = collect([text]);
        for (let i = 0; i <= text.length; i++) {
          const split = collect([text.slice(0, i), text.slice(i)]);
          if (!Bun.deepEquals(split, whole)) expect({ offset: i, ...split }).toEqual({ offset: i, ...whole });
        }
      });

      test("random chunk sizes", () => {
        const whole = collect([bytes]);
        for (let seed = 1; seed <= 200; seed++) {
          const got = collect(randomChunks(bytes, seed, 1 + (seed % 64)));
          if (!Bun.deepEquals(got, whole)) expect({ seed, ...got }).toEqual({ seed, ...whole });
        }
      });
    });
  }

  test("all fixtures concatenated, with the Anthropic part in CR endings", () => {
    const cr = anthropicStream.replaceAll("\n", "\r");
    const text = openAiStream + cr + crlfStream;
    const bytes = utf8.encode(text);
    const whole = collect([bytes]);
    expect(whole.events).toEqual([...openAiExpected.events, ...anthropicExpected.events, ...crlfExpected.events]);
    for (let i = 0; i <= bytes.length; i += 7) {
      const split = collect([bytes.subarray(0, i), bytes.subarray(i)]);
      if (!Bun.deepEquals(split, whole)) expect({ offset: i, ...split }).toEqual({ offset: i, ...whole });
    }
  });
});

describe("efficiency", () => {
  test("10,000 single-character chunks of one long data line", () => {
    const events: SseEvent[] = [];
    const parser = createSseParser({ onEvent: (e) => events.push(e) });
    parser.feed("data: ");
    const parts: string[] = [];
    for (let i = 0; i < 10_000; i++) {
      const ch = String.fromCharCode(97 + (i % 26));
      parts.push(ch);
      parser.feed(ch);
    }
    parser.feed("\n\n");
    parser.end();
    expect(events).toHaveLength(1);
    expect(events[0].data).toBe(parts.join(""));
    expect(events[0].data).toHaveLength(10_000);
  });

  test("single-byte chunks of a CR-only stream with many lines", () => {
    const text = Array.from({ length: 500 }, (_, i) => `data: ${i}\r`).join("") + "\r";
    const got = collect(byteByByte(utf8.encode(text)));
    expect(got.events).toHaveLength(1);
    expect(got.events[0].data.split("\n")).toHaveLength(500);
    expect(got.events[0].data.endsWith("\n499")).toBe(true);
  });
});
