/**
 * ToolArgumentsStream (formats/common/json-prefix.ts): a tool call's arguments, split anywhere,
 * go out so that what went out is always read by the Anthropic SDK's own partial-JSON parser (as
 * `messages.stream()` reads `input_json_delta`s) and ends as one object: the arguments themselves
 * when they are one, else the upstream's text kept as `_raw`.
 */
import { describe, expect, test } from "bun:test";
import { partialParse } from "@anthropic-ai/sdk/_vendor/partial-json-parser/parser";
import { ToolArgumentsStream } from "../../../src/formats/common/json-prefix.ts";
import { toolInput } from "../../../src/formats/common/json-shape.ts";

/** Every split of `text` into pieces of `size` characters (and one piece), through a fresh stream. */
function sent(text: string, size: number): { pieces: string[]; rest: string } {
  const stream = new ToolArgumentsStream();
  const pieces: string[] = [];
  for (let i = 0; i < text.length; i += size) pieces.push(stream.push(text.slice(i, i + size)));
  return { pieces, rest: stream.finish() };
}

/** What the SDK holds after each delta, and at the end: it never throws. */
function readBySdk(text: string, size: number): unknown {
  const { pieces, rest } = sent(text, size);
  let buffer = "";
  for (const piece of [...pieces, rest]) {
    buffer += piece;
    if (buffer) expect(() => partialParse(buffer)).not.toThrow();
  }
  return buffer ? partialParse(buffer) : {};
}

const VALID = ['{"city":"Paris"}', '{"a":[1,-2.5e+3,true,false,null,{"b":"x\\"y\\\\z\\u00e9"}],"c":{}}', ' { "q" : "multi\\nline" } ', "{}", '{"path":"a.txt","content":"line 1\\nline 2"}'];
const BROKEN: [string, Record<string, unknown>][] = [
  ['{"city": oops', { city: null }],
  ['{"city": Paris}', { city: null }],
  ['{"done": True}', { done: null }],
  ["{'city': 'Paris'}", {}],
  ['{"a":1,}', { a: 1 }],
  ['{"a": [1, 2,, 3]}', { a: [1, 2, null] }],
  ['{"a": {"b": "c\\q"}}', { a: { b: "c\\" } }],
  ['{"a": "\\u12zz"}', { a: "\u1200" }],
  ['{"a": 1.}', { a: 1.0 }],
  ['{"k"  x', { k: null }],
  ['{"n": {"m": 1, x}}', { n: { m: 1, "": null } }],
];

describe("arguments that are one object", () => {
  for (const text of VALID) {
    test(JSON.stringify(text), () => {
      for (const size of [1, 2, 3, 7, 1000]) {
        const { pieces, rest } = sent(text, size);
        expect((pieces.join("") + rest).trim()).toBe(text.trim());
        expect(readBySdk(text, size)).toEqual(JSON.parse(text));
      }
    });
  }
});

describe("arguments that are not JSON: what went out is closed into an object holding the upstream's text as _raw", () => {
  for (const [text, kept] of BROKEN) {
    test(JSON.stringify(text), () => {
      for (const size of [1, 2, 5, 1000]) {
        const { pieces, rest } = sent(text, size);
        const whole = pieces.join("") + rest;
        expect(JSON.parse(whole)).toEqual({ ...kept, _raw: text });
        expect(readBySdk(text, size)).toEqual({ ...kept, _raw: text });
      }
    });
  }

  test("text that does not start as an object goes out whole at the end, as the whole answer writes it", () => {
    for (const text of ["not json", "[1,2]", "12", '"s"', "True"]) {
      const { pieces, rest } = sent(text, 2);
      expect(pieces.join("")).toBe("");
      expect(JSON.parse(rest)).toEqual(toolInput(text));
    }
  });

  test("two objects run together (OpenAI's parallel calls in one): the first stands, nothing more goes out", () => {
    const { pieces, rest } = sent('{"city":"Paris"}{"city":"Rome"}', 4);
    expect(pieces.join("") + rest).toBe('{"city":"Paris"}');
  });

  test("an unfinished prefix (cut by the token cap) is left as it is: the SDK reads it", () => {
    const { pieces, rest } = sent('{"city":"Paris","unit":"cel', 3);
    expect(pieces.join("")).toBe('{"city":"Paris","unit":"cel');
    expect(rest).toBe("");
    expect(readBySdk('{"city":"Paris","unit":"cel', 3)).toEqual({ city: "Paris" });
  });

  test("a control character inside a string is not JSON", () => {
    const { pieces, rest } = sent('{"a":"x\ny"}', 3);
    expect(JSON.parse(pieces.join("") + rest)).toEqual({ a: "x", _raw: '{"a":"x\ny"}' });
  });
});

test("seeded fuzz: valid arguments with one character changed, split anywhere: the SDK never throws on what went out, and a text that went wrong ends as one object", () => {
  let seed = 20261130;
  const random = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  const noise = ['"', "\\", "{", "}", "[", "]", ",", ":", "x", "1", ".", "-", "e", "t", " ", "\n", "u", "'"];
  for (let n = 0; n < 3000; n++) {
    const base = VALID[Math.floor(random() * VALID.length)]!;
    const at = Math.floor(random() * base.length);
    const text = random() < 0.1 ? base : base.slice(0, at) + noise[Math.floor(random() * noise.length)] + base.slice(at + (random() < 0.5 ? 1 : 0));
    const stream = new ToolArgumentsStream();
    let buffer = "";
    for (let i = 0; i < text.length; ) {
      const size = 1 + Math.floor(random() * 6);
      buffer += stream.push(text.slice(i, i + size));
      i += size;
      if (buffer) expect(() => partialParse(buffer)).not.toThrow();
    }
    const rest = stream.finish();
    buffer += rest;
    if (buffer) expect(() => partialParse(buffer)).not.toThrow();
    let whole: unknown;
    try {
      whole = JSON.parse(text);
    } catch {
      whole = undefined;
    }
    // One object as it came: sent as it came. Otherwise, when anything was closed, one object with the text as `_raw`.
    if (whole !== undefined && typeof whole === "object" && whole !== null && !Array.isArray(whole)) expect(JSON.parse(buffer)).toEqual(whole);
    else if (rest) {
      const out = JSON.parse(buffer);
      expect(out !== null && typeof out === "object" && !Array.isArray(out)).toBe(true);
      expect(out._raw === text || (whole !== undefined && "value" in out)).toBe(true);
    }
  }
});
