import { describe, expect, test } from "bun:test";
import { Value } from "@sinclair/typebox/value";
import { firstBodyError } from "../../../src/http/plugins/first-body-error.ts";
import { validationMessage } from "../../../src/http/plugins/errors.ts";
import { ChatRequest } from "../../../src/formats/openai-chat/schema.ts";
import { MessagesRequest } from "../../../src/formats/anthropic-messages/schema.ts";
import { ResponsesRequest } from "../../../src/formats/openai-responses/schema.ts";

/** What Elysia's validation error says of a body (TypeBox's interpreted checker, first error). */
const elysiaSays = (schema: Parameters<typeof Value.Errors>[0], body: unknown) => validationMessage(Value.Errors(schema, body).First() as never);

const message = (i: number) => ({ role: "user", content: `message ${i}` });
const cases: [string, Parameters<typeof Value.Errors>[0], unknown][] = [
  ["chat: the last message's role", ChatRequest, { model: "m", messages: [...Array.from({ length: 500 }, (_, i) => message(i)), { role: "bogus", content: "x" }] }],
  ["chat: a message without content's type", ChatRequest, { model: "m", messages: [message(0), { role: "user", content: 5 }] }],
  ["chat: messages missing", ChatRequest, { model: "m" }],
  ["chat: stream not a boolean", ChatRequest, { model: "m", messages: [message(0)], stream: "yes" }],
  ["chat: a tool's function without a name", ChatRequest, { model: "m", messages: [message(0)], tools: [{ type: "function", function: { parameters: {} } }] }],
  ["messages: max_tokens a string", MessagesRequest, { model: "m", max_tokens: "many", messages: [message(0)] }],
  ["messages: a block of an unknown shape late", MessagesRequest, { model: "m", max_tokens: 5, messages: [...Array.from({ length: 300 }, (_, i) => message(i)), { role: "user", content: [{ type: 5 }] }] }],
  ["responses: input a number", ResponsesRequest, { model: "m", input: 5 }],
  // A reviewer's cases: a missing property before another's wrong type; an array's bound before its elements.
  ["chat: messages missing beside a wrong model", ChatRequest, { model: 5 }],
  ["chat: 17 models, the first empty", ChatRequest, { models: ["", ...Array.from({ length: 16 }, (_, i) => `m${i}`)], messages: [message(0)] }],
];

describe("the first failure of a large body, found without walking all of it", () => {
  test.each(cases)("%s: the same words Elysia's validation gives", (_name, schema, body) => {
    const found = firstBodyError(schema as never, body);
    expect(found).toBeDefined();
    expect(validationMessage(found)).toBe(elysiaSays(schema, body));
  });

  test("a valid body has none", () => {
    expect(firstBodyError(ChatRequest as never, { model: "m", messages: [message(0), message(1)] })).toBeUndefined();
  });

  test("of 78,000 messages only the failing one is walked by the interpreted checker", () => {
    const body = { model: "m", messages: [...Array.from({ length: 78_000 }, (_, i) => message(i)), { role: "bogus", content: "x" }] };
    const walked: unknown[] = [];
    const counting = (schema: never, value: unknown) => (walked.push(value), Value.Errors(schema, value).First());
    expect(validationMessage(firstBodyError(ChatRequest as never, body, "", counting as never))).toBe("Invalid request: messages.78000.role: must be one of system, developer, user, assistant, tool.");
    // The interpreted checker saw the failing message's role alone, never the whole body.
    expect(walked).toEqual(["bogus"]);
  });
});
