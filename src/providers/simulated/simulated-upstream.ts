import type { StreamEvent } from "../../streaming/events.ts";
import { createOpenAIEncoder, encodeOpenAIBody } from "../../streaming/encode-openai.ts";
import { createAnthropicEncoder, encodeAnthropicBody } from "../../streaming/encode-anthropic.ts";
import { promptText } from "../../translate/prepare-upstream.ts";
import type { Transport as Transport } from "../../transport/transport.ts";
import { drawPng } from "./draw-png.ts";
import { HASH_EMBEDDING_DIMENSIONS, HASH_EMBEDDING_MAX_DIMENSIONS, hashEmbedding } from "./hash-embedding.ts";
import { inputsOf } from "../../billing/embeddings-input.ts";
import { float32Base64 } from "../../streaming/encode-embeddings.ts";

const LOREM =
  "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat.".split(" ");

/**
 * The built-in upstream: answers `simulated://openai/…` and `simulated://anthropic/…` in each
 * vendor's wire format, written by the gateway's own encoders, so a fresh clone works with no
 * vendor key and exercises exactly the path a real upstream takes.
 */
export function withSimulatedUpstream(real: Transport): Transport {
  return (url, init) => (url.startsWith("simulated://") ? Promise.resolve(simulatedAnswer(url, init)) : real(url, init));
}

function simulatedAnswer(url: string, init: RequestInit): Response {
  const format = url.startsWith("simulated://anthropic") ? "anthropic" : "openai";
  const body = JSON.parse(String(init.body)) as Record<string, unknown>;
  if (url.endsWith("/images/generations")) {
    // The OpenAI images API shape, with a picture drawn from the prompt.
    const png = Buffer.from(drawPng(String(body.prompt ?? ""))).toString("base64");
    return Response.json({ created: Math.floor(Date.now() / 1000), data: [{ b64_json: png, revised_prompt: body.prompt }] });
  }
  if (url.endsWith("/embeddings")) return simulatedEmbeddings(body);
  if (url.endsWith("/messages/count_tokens")) return Response.json({ input_tokens: Math.max(1, Math.ceil(promptText(format, body).length / 4)) });
  const maxTokens = Number(body.max_tokens ?? body.max_completion_tokens ?? 256);
  const words = answerWords(String(body.model), body, format).slice(0, Math.max(1, maxTokens));
  const inputTokens = Math.max(1, Math.ceil(promptText(format, body).length / 4));
  const events: StreamEvent[] = [{ type: "start", inputTokens }];
  words.forEach((word, i) => events.push({ type: "text", text: i === 0 ? word : ` ${word}` }));
  events.push({ type: "finish", reason: "stop" }, { type: "usage", inputTokens, outputTokens: words.length });

  const ctx = {
    id: format === "openai" ? `chatcmpl-${randomSuffix()}` : `msg_${randomSuffix()}`,
    created: Math.floor(Date.now() / 1000),
    model: String(body.model),
    includeUsage: (body.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true,
  };
  if (body.stream !== true) {
    return Response.json(format === "openai" ? encodeOpenAIBody(events, ctx) : encodeAnthropicBody(events, ctx));
  }
  const encoder = format === "openai" ? createOpenAIEncoder(ctx) : createAnthropicEncoder(ctx);
  let text = "";
  for (const e of events) text += encoder.event(e);
  text += encoder.end();
  return new Response(text, { headers: { "content-type": "text/event-stream" } });
}

function answerWords(model: string, body: Record<string, unknown>, format: "openai" | "anthropic"): string[] {
  if (model === "lorem") return LOREM;
  const messages = (body.messages as { role: string; content: unknown }[]) ?? [];
  const lastUser = [...messages].reverse().find((m) => m.role === "user");
  const said = lastUser ? promptText(format, { messages: [lastUser] }).trim() : "";
  return `Echo: ${said || "(nothing)"}`.split(/\s+/);
}

/** The OpenAI embeddings API's answer, with vectors hashed from each input (hash-embedding.ts). */
function simulatedEmbeddings(body: Record<string, unknown>): Response {
  const dimensions = body.dimensions ?? HASH_EMBEDDING_DIMENSIONS;
  if (typeof dimensions !== "number" || !Number.isInteger(dimensions) || dimensions < 1 || dimensions > HASH_EMBEDDING_MAX_DIMENSIONS) {
    const message = `This model supports dimensions from 1 to ${HASH_EMBEDDING_MAX_DIMENSIONS}.`;
    return Response.json({ error: { message, type: "invalid_request_error", param: "dimensions", code: null } }, { status: 400 });
  }
  const inputs = inputsOf(body.input);
  let promptTokens = 0;
  const data = inputs.map((input, index) => {
    promptTokens += typeof input === "string" ? Math.max(1, Math.ceil(input.length / 4)) : input.length;
    const vector = hashEmbedding(input, dimensions);
    return { object: "embedding", index, embedding: body.encoding_format === "base64" ? float32Base64(Array.from(vector)) : Array.from(vector) };
  });
  return Response.json({ object: "list", data, model: String(body.model), usage: { prompt_tokens: promptTokens, total_tokens: promptTokens } });
}

/** 12 random bytes, URL-safe: an answer id's tail, as a vendor's ids look. */
function randomSuffix(): string {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(12))).toString("base64url");
}
