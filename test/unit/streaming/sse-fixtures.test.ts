import { describe, expect, test } from "bun:test";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { createSseParser, type SseEvent } from "../../../src/streaming/sse-parser.ts";
import { FIXTURE_VENDORS, readFixture } from "../../helpers/fake-upstream.ts";

const FIXTURES = join(import.meta.dir, "../../fixtures");
const names = FIXTURE_VENDORS.flatMap((vendor) => readdirSync(join(FIXTURES, vendor))).filter((n) => n.endsWith(".sse"));

function parse(chunks: Uint8Array[]) {
  const events: SseEvent[] = [];
  const comments: string[] = [];
  const parser = createSseParser({ onEvent: (e) => events.push(e), onComment: (c) => comments.push(c) });
  for (const c of chunks) parser.feed(c);
  parser.end();
  return { events, comments };
}

describe("every recorded upstream stream parses the same however it is split", () => {
  test("there are fixtures of both vendors", () => {
    expect(names.some((n) => n.startsWith("openai-"))).toBe(true);
    expect(names.some((n) => n.startsWith("anthropic-"))).toBe(true);
  });

  for (const name of names) {
    test(name, () => {
      const bytes = readFixture(name);
      const whole = parse([bytes]);
      expect(whole.events.length).toBeGreaterThan(2);
      for (const e of whole.events) {
        // Every data line of a vendor stream is JSON, but for OpenAI's end marker.
        if (e.data !== "[DONE]") expect(() => JSON.parse(e.data)).not.toThrow();
      }
      for (let cut = 1; cut < bytes.length; cut++) {
        expect(parse([bytes.subarray(0, cut), bytes.subarray(cut)])).toEqual(whole);
      }
      expect(parse(Array.from(bytes, (_, i) => bytes.subarray(i, i + 1)))).toEqual(whole);
    });
  }
});
