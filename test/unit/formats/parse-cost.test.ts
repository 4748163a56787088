import { describe, expect, test } from "bun:test";
import { isOpenAIStrictSchema } from "../../../src/formats/common/structured-output.ts";

/**
 * Whether a schema is strict reads its `required` list once, not once per property: with
 * `includes` per property, 9,999 properties against 950,000 entries stalled the request thread
 * 10 s (a hostile-tenant probe, 2026-11-30). Counted by reads of the list, not by a clock.
 */
test("a schema's required list is read in one pass, however many properties it has", () => {
  const names = Array.from({ length: 2_000 }, (_, i) => `p${i}`);
  let reads = 0;
  const list = [...Array.from({ length: 20_000 }, () => "x"), ...names];
  const required = new Proxy(list, {
    get(target, key, receiver) {
      if (typeof key === "string" && /^\d+$/.test(key)) reads++;
      return Reflect.get(target, key, receiver);
    },
  });
  const schema = { type: "object", additionalProperties: false, properties: Object.fromEntries(names.map((n) => [n, { type: "string" }])), required };
  expect(isOpenAIStrictSchema(schema)).toBe(true);
  expect(reads).toBeLessThanOrEqual(2 * list.length);
  expect(isOpenAIStrictSchema({ ...schema, required: names.slice(1) })).toBe(false);
});

test("tool-call arguments are parsed no further than one body's limits, all of a request's calls together; past them they go as text", async () => {
  const { jsonBudget, toolInput } = await import("../../../src/formats/common/json-shape.ts");
  // 60,000 arrays a call: each within the body's 100,000, two together past it.
  const args = `{"a":[${Array.from({ length: 60_000 }, () => "[]").join(",")}]}`;
  const budget = jsonBudget();
  const first = toolInput(args, budget);
  expect(Array.isArray((first as { a: unknown }).a)).toBe(true);
  expect(toolInput(args, budget)).toEqual({ _raw: args });
  // Small ones still parse from what is left.
  expect(toolInput('{"q":1}', budget)).toEqual({ q: 1 });
  // A fresh budget (another request) parses it again.
  expect(Array.isArray((toolInput(args, jsonBudget()) as { a: unknown }).a)).toBe(true);
});

describe("JsonObjectProgress: whether streamed arguments are one whole object yet", async () => {
  const { JsonObjectProgress } = await import("../../../src/formats/common/json-shape.ts");
  /** What the encoder asked before: the whole text parsed each time. */
  const reference = (text: string) => {
    const t = text.trim();
    if (!t.startsWith("{") || !t.endsWith("}")) return false;
    try {
      JSON.parse(text);
      return true;
    } catch {
      return false;
    }
  };
  const texts = [
    '{"a":1}', ' {"a": [1, {"b": "}"}]} ', '{"s":"a\\"}b\\\\"}', '{"a":1} {"b":2}', '{"a":1}x', "[1,2]", '"x"', "12", "{", "{]", "{}", '{"u":"\\u007d"}', "  ", "", '{"a":{"b":{}}}\n',
    '{"q":"{[\\"]}"}', '{"a":1,}', "{} ",
  ];
  test("after every piece, in every split, it says what parsing the whole text says", () => {
    let seed = 7;
    const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    for (const text of texts) {
      for (let round = 0; round < 30; round++) {
        const progress = new JsonObjectProgress();
        let at = 0;
        while (at < text.length) {
          const next = Math.min(text.length, at + 1 + Math.floor(random() * 4));
          progress.append(text.slice(at, next));
          at = next;
          expect([text.slice(0, at), progress.whole]).toEqual([text.slice(0, at), reference(text.slice(0, at))]);
        }
        expect(progress.text).toBe(text);
      }
    }
  });

  test("a closed but broken object followed by 40,000 spaces is parsed once, not once a space", () => {
    const progress = new JsonObjectProgress();
    progress.append(`{"x":"${"a".repeat(1000)}",}`);
    const parse = JSON.parse;
    let parses = 0;
    JSON.parse = ((text: string, reviver?: never) => (parses++, parse(text, reviver))) as typeof JSON.parse;
    try {
      for (let i = 0; i < 40_000; i++) {
        progress.append(" ");
        expect(progress.whole).toBe(false);
      }
    } finally {
      JSON.parse = parse;
    }
    expect(parses).toBe(1);
  });

  test("20,000 pieces, asked after each: the text is read once, not once a piece", () => {
    const progress = new JsonObjectProgress();
    progress.append('{"a":[{}');
    let wholeSeen = false;
    for (let i = 0; i < 20_000; i++) {
      progress.append(",{}");
      wholeSeen ||= progress.whole;
    }
    progress.append("]}");
    expect([wholeSeen, progress.whole]).toEqual([false, true]);
  });
});
