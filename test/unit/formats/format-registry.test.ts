import { expect, test } from "bun:test";
import { CLIENT_FORMATS, type ClientFormat } from "../../../src/formats/format.ts";
import { NO_PLAN } from "../../../src/formats/openai-responses/encode-responses.ts";

/** The registry of client formats (src/formats/format.ts): what the gateway asks of each. */
const formats: ClientFormat[] = [
  CLIENT_FORMATS["openai-chat"],
  CLIENT_FORMATS["anthropic-messages"],
  CLIENT_FORMATS["openai-responses"](NO_PLAN),
  CLIENT_FORMATS["openai-embeddings"]("float"),
];

test("each format is registered under its own id, with the wire its body travels in and its answers' id prefix", () => {
  expect(Object.keys(CLIENT_FORMATS)).toEqual(formats.map((f) => f.id));
  expect(formats.map((f) => [f.id, f.wire, f.idPrefix])).toEqual([
    ["openai-chat", "openai", "chatcmpl-"],
    ["anthropic-messages", "anthropic", "msg_"],
    ["openai-responses", "openai", "resp_"],
    ["openai-embeddings", "openai", ""],
  ]);
});

test("only a vendor's own format relays the vendor's frames; the Responses API and embeddings are always encoded", () => {
  expect(formats.filter((f) => f.relay !== undefined).map((f) => f.id)).toEqual(["openai-chat", "anthropic-messages"]);
});

test("embeddings never stream: asking for their encoder is a programming error, refused before any frame", () => {
  expect(() => CLIENT_FORMATS["openai-embeddings"]("base64").encoder({ id: "x", created: 0, model: "m", includeUsage: false })).toThrow("embeddings do not stream");
});
