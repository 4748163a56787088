import { describe, expect, test } from "bun:test";
import { nestingDepth } from "../../../../src/formats/common/json-shape.ts";

/** The plain definition, one character at a time: what the faster scan must agree with. */
function referenceDepth(text: string, limit: number): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === "{" || c === "[") {
      if (++depth > max && (max = depth) > limit) return max;
    } else if (c === "}" || c === "]") depth--;
  }
  return max;
}

describe("nestingDepth", () => {
  const cases: [string, string][] = [
    ["an empty object", "{}"],
    ["a chat body", JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 5 })],
    ["brackets inside a string", JSON.stringify({ a: "[[[[{{{{" + "[".repeat(200) })],
    ["an escaped quote before brackets in a string", JSON.stringify({ a: 'say "[[[" and {{{' })],
    ["a string ending in an escaped backslash", '{"a":"x\\\\","b":[[[1]]]}'],
    ["three backslashes then a quote (escaped) then brackets", '{"a":"\\\\\\"[[[[","b":[1]}'],
    ["four backslashes then the closing quote", '{"a":"\\\\\\\\","b":[[1]]}'],
    ["an empty string", '{"":[[""]],"b":""}'],
    ["a key with brackets", '{"[{":[{"}]":1}]}'],
    ["unterminated string", '{"a":[["abc'],
    ["65 levels", "[".repeat(65) + "]".repeat(65)],
    ["64 levels", "[".repeat(64) + "]".repeat(64)],
    ["deep inside a string after a real level", '[["' + "[".repeat(100) + '"]]'],
    ["unicode and escapes", JSON.stringify({ a: "é\u2028\"\\" + "☃".repeat(50), b: [{ c: ["\\\"]"] }] })],
  ];
  for (const [name, text] of cases) {
    test(name, () => expect(nestingDepth(text, 64)).toBe(referenceDepth(text, 64)));
  }

  test("random JSON-like texts full of quotes and backslashes agree with the plain definition", () => {
    let seed = 7;
    const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    const alphabet = ['"', "\\", "[", "]", "{", "}", "a", ",", ":", " "];
    for (let n = 0; n < 2000; n++) {
      let text = "";
      const length = 1 + Math.floor(random() * 80);
      for (let i = 0; i < length; i++) text += alphabet[Math.floor(random() * alphabet.length)];
      expect([text, nestingDepth(text, 8)]).toEqual([text, referenceDepth(text, 8)]);
    }
  });

  test("stops at the limit: 5,000,000 opening brackets are refused after 65", () => {
    expect(nestingDepth("[".repeat(5_000_000), 64)).toBe(65);
  });
});
