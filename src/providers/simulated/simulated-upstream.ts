import type { StreamEvent } from "../../streaming/events.ts";
import { createOpenAIEncoder, encodeOpenAIBody } from "../../formats/openai-chat/encode-openai.ts";
import { createAnthropicEncoder, encodeAnthropicBody } from "../../formats/anthropic-messages/encode-anthropic.ts";
import { promptText } from "../../formats/prepare-upstream.ts";
import { usesLegacyFunctions, withToolsForLegacyFunctions } from "../../formats/openai-chat/legacy-functions.ts";
import type { ChatRequest } from "../../formats/openai-chat/schema.ts";
import type { Transport as Transport } from "../../transport/transport.ts";
import { drawPng } from "./draw-png.ts";
import { HASH_EMBEDDING_DIMENSIONS, HASH_EMBEDDING_MAX_DIMENSIONS, hashEmbedding } from "./hash-embedding.ts";
import { inputsOf } from "../../formats/openai-embeddings/embeddings-input.ts";
import { float32Base64 } from "../../formats/openai-embeddings/encode-embeddings.ts";

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
  // A stop sequence ends the answer before it, as a vendor's does (`stop`; Anthropic says which:
  // `stop_sequence`), so clients can try theirs in the quick start too (an SDK probe: ignored).
  const { words: answer, stopSequence } = stoppedAt(answerWords(String(body.model), body, format), stopSequences(format, body));
  const words = answer.slice(0, Math.max(stopSequence === undefined ? 1 : 0, maxTokens));
  // Cut by the answer limit, it says so as a vendor does (`length`, `max_tokens`, `incomplete`), so
  // clients can try their handling of a cut answer in the quick start too.
  const cut = words.length < answer.length;
  const inputTokens = Math.max(1, Math.ceil(promptText(format, body).length / 4));
  const events: StreamEvent[] = [{ type: "start", inputTokens }];
  // What a real model would do with a forced tool or a schema: a call, or JSON of the schema's
  // shape, so SDK helpers (`chat.completions.parse`, `generateObject`, a forced tool) work in the
  // quick start too. Strings in it say what the echo would have said.
  const said = words.join(" ");
  // A client of OpenAI's legacy function calling is answered in kind, as OpenAI does.
  const legacy = format === "openai" && usesLegacyFunctions(body);
  const forced = forcedTool(format, legacy ? (withToolsForLegacyFunctions(body as ChatRequest) as Record<string, unknown>) : body);
  const schema = forced ? undefined : answerSchema(format, body);
  if (forced) {
    const args = JSON.stringify(sampleOf(forced.schema, said, 0, { left: SAMPLE_MAX_CHARS }));
    events.push({ type: "tool-call", index: 0, id: format === "openai" ? `call_${randomSuffix().slice(0, 24)}` : `toolu_${randomSuffix().slice(0, 24)}`, name: forced.name, argumentsDelta: args });
    events.push({ type: "finish", reason: "tool_calls" }, { type: "usage", inputTokens, outputTokens: Math.max(1, Math.ceil(args.length / 4)) });
  } else if (schema !== undefined) {
    const json = JSON.stringify(sampleOf(schema, said, 0, { left: SAMPLE_MAX_CHARS }));
    events.push({ type: "text", text: json }, { type: "finish", reason: "stop" }, { type: "usage", inputTokens, outputTokens: Math.max(1, Math.ceil(json.length / 4)) });
  } else {
    words.forEach((word, i) => events.push({ type: "text", text: i === 0 ? word : ` ${word}` }));
    events.push(cut ? { type: "finish", reason: "length" } : stopSequence !== undefined ? { type: "finish", reason: "stop_sequence", stopSequence } : { type: "finish", reason: "stop" });
    events.push({ type: "usage", inputTokens, outputTokens: words.length });
  }

  const ctx = {
    id: format === "openai" ? `chatcmpl-${randomSuffix()}` : `msg_${randomSuffix()}`,
    created: Math.floor(Date.now() / 1000),
    model: String(body.model),
    includeUsage: (body.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true,
    legacyFunctions: legacy,
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

type Schema = Record<string, unknown>;

/** The tool the request forces (OpenAI `tool_choice` function or `required`, Anthropic `tool` or `any`), with its parameters' schema. */
function forcedTool(format: "openai" | "anthropic", body: Record<string, unknown>): { name: string; schema: Schema } | undefined {
  const choice = body.tool_choice as { type?: string; name?: string; function?: { name?: string }; allowed_tools?: { mode?: string; tools?: { function?: { name?: string } }[] } } | string | undefined;
  if (!Array.isArray(body.tools) || body.tools.length === 0 || choice === undefined) return undefined;
  if (format === "openai") {
    const tools = body.tools as { type?: string; function?: { name?: string; parameters?: Schema } }[];
    // A required allowed subset forces its first tool.
    const subset = typeof choice === "object" && choice.type === "allowed_tools" ? choice.allowed_tools : undefined;
    const name = choice === "required" ? tools[0]?.function?.name
      : subset ? (subset.mode === "required" ? subset.tools?.[0]?.function?.name : undefined)
      : typeof choice === "object" ? choice.function?.name : undefined;
    const tool = tools.find((t) => t.function?.name === name);
    return tool && name ? { name, schema: tool.function?.parameters ?? { type: "object" } } : undefined;
  }
  if (typeof choice !== "object") return undefined;
  const tools = body.tools as { name?: string; input_schema?: Schema }[];
  const name = choice.type === "any" ? tools[0]?.name : choice.type === "tool" ? choice.name : undefined;
  const tool = tools.find((t) => t.name === name);
  return tool && name ? { name, schema: tool.input_schema ?? { type: "object" } } : undefined;
}

/** The schema the answer's text must follow: OpenAI `response_format` (json_schema, json_object), Anthropic `output_config.format`. */
function answerSchema(format: "openai" | "anthropic", body: Record<string, unknown>): Schema | undefined {
  if (format === "openai") {
    const rf = body.response_format as { type?: string; json_schema?: { schema?: Schema } } | undefined;
    if (rf?.type === "json_schema") return rf.json_schema?.schema ?? { type: "object" };
    if (rf?.type === "json_object") return { type: "object", properties: { answer: { type: "string" } } };
    return undefined;
  }
  const f = (body.output_config as { format?: { type?: string; schema?: Schema } } | undefined)?.format;
  return f?.type === "json_schema" ? (f.schema ?? { type: "object" }) : undefined;
}

/**
 * Most a sampled answer holds, about in characters: every value costs one, a string its length.
 * Without it a 2 KB schema whose definitions name each other (40 properties, each a `$ref` to the
 * same object) made 40^4 values on the request thread: a free request to `switchyard/echo` held
 * every tenant's requests 32 s and took the gateway to 5 GB (a hostile-tenant probe). Past the
 * budget strings are cut, values null and objects end: the answer stops following the schema, as a
 * real model's stops at its answer limit.
 */
export const SAMPLE_MAX_CHARS = 64 * 1024;

/** A value of the schema's shape: every property, the first of each choice, `text` for strings; within `budget` (SAMPLE_MAX_CHARS). */
function sampleOf(schema: Schema, text: string, depth: number, budget: { left: number }, root: Schema = schema): unknown {
  if (depth > 8 || budget.left <= 0) return null;
  budget.left--;
  const ref = typeof schema.$ref === "string" ? schema.$ref.match(/^#\/(?:\$defs|definitions)\/(.+)$/)?.[1] : undefined;
  if (ref) {
    const defs = (root.$defs ?? root.definitions) as Record<string, Schema> | undefined;
    return defs?.[ref] ? sampleOf(defs[ref]!, text, depth + 1, budget, root) : null;
  }
  if ("const" in schema) return schema.const;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0];
  for (const key of ["anyOf", "oneOf", "allOf"] as const) {
    const options = schema[key];
    if (Array.isArray(options) && options.length > 0) return sampleOf(options[0] as Schema, text, depth + 1, budget, root);
  }
  const type = Array.isArray(schema.type) ? (schema.type.find((t) => t !== "null") ?? "null") : schema.type;
  switch (type) {
    case "object": {
      const out: Record<string, unknown> = {};
      const properties = (schema.properties ?? {}) as Record<string, Schema>;
      for (const [name, property] of Object.entries(properties)) {
        if (budget.left <= 0) break;
        budget.left -= name.length;
        out[name] = sampleOf(property, text, depth + 1, budget, root);
      }
      return out;
    }
    case "array": {
      const items = (schema.items ?? { type: "string" }) as Schema;
      const count = Math.max(1, Number(schema.minItems ?? 1));
      return Array.from({ length: Math.min(count, 3) }, () => sampleOf(items, text, depth + 1, budget, root));
    }
    case "integer":
    case "number":
      return typeof schema.minimum === "number" ? schema.minimum : typeof schema.exclusiveMinimum === "number" ? schema.exclusiveMinimum + 1 : 0;
    case "boolean":
      return true;
    case "null":
      return null;
    default: {
      const kept = text.length <= budget.left ? text : text.slice(0, Math.max(0, budget.left));
      budget.left -= kept.length;
      return kept;
    }
  }
}

/** The request's stop sequences: OpenAI's `stop` (a string or up to four), Anthropic's `stop_sequences`. */
function stopSequences(format: "openai" | "anthropic", body: Record<string, unknown>): string[] {
  const stop = format === "openai" ? body.stop : body.stop_sequences;
  const list = typeof stop === "string" ? [stop] : Array.isArray(stop) ? stop : [];
  return list.filter((s): s is string => typeof s === "string" && s.length > 0);
}

/** The answer up to the earliest stop sequence in it (which is not said), as words. */
function stoppedAt(words: string[], stops: string[]): { words: string[]; stopSequence?: string } {
  const text = words.join(" ");
  let at = -1;
  let which: string | undefined;
  for (const stop of stops) {
    const i = text.indexOf(stop);
    if (i >= 0 && (at < 0 || i < at)) {
      at = i;
      which = stop;
    }
  }
  if (which === undefined) return { words };
  const kept = text.slice(0, at).trimEnd();
  return { words: kept === "" ? [] : kept.split(" "), stopSequence: which };
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
