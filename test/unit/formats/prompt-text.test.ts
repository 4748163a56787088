import { expect, test } from "bun:test";
import { promptText } from "../../../src/formats/prepare-upstream.ts";

test("a custom tool's call in the history counts as prompt: its name and raw input (a review: a 100,000-character input counted as nothing)", () => {
  const input = "X".repeat(100_000);
  const text = promptText("openai", {
    messages: [
      { role: "user", content: "hi" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "custom", custom: { name: "apply_patch", input } }] },
      { role: "tool", tool_call_id: "call_1", content: "ok" },
    ],
  });
  expect(text).toContain("apply_patch");
  expect(text).toContain(input);
});
