import { expect, test } from "bun:test";
import { unknownModelsError } from "../../../src/accounts/model-access.ts";

const known = { ids: ["anthropic/claude-x", "openai/gpt-x"], resolve: (name: string) => ({ sonnet: "anthropic/claude-x", "anthropic/claude-x": "anthropic/claude-x" })[name] };

test("a list whose every entry matches a configured model id, exactly or by prefix, is fine", () => {
  expect(unknownModelsError(["anthropic/claude-x", "openai/*", "*"], known)).toBeNull();
});

test("an entry matching no model, an empty prefix's match aside, and an alias are each named", () => {
  expect(unknownModelsError(["anthropic/claude-z", "sonnet", "google/*"], known)).toBe(
    `models: "anthropic/claude-z" matches no configured model; "sonnet" is an alias: list its model, "anthropic/claude-x"; "google/*" matches no configured model. A key's list names model ids (vendor/name, as GET /v1/models lists them) or prefix* patterns.`,
  );
});

test("at most five are named, each cut to 60 characters", () => {
  const many = Array.from({ length: 9 }, (_, i) => `x/${"m".repeat(80)}${i}`);
  const message = unknownModelsError(many, known)!;
  expect(message.match(/matches no configured model/g)).toHaveLength(5);
  expect(message).not.toContain("m".repeat(61));
});
