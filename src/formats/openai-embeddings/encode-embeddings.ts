import type { EncodeContext } from "../../streaming/client-sink.ts";
import type { StreamEvent } from "../../streaming/events.ts";
import { JsonText } from "../common/json-text.ts";

/**
 * OpenAI's embeddings answer, `{object: "list", data: [{object: "embedding", index, embedding}],
 * model, usage: {prompt_tokens, total_tokens}}`, written from the upstream's own body: its vectors
 * pass as they came whenever they are already in the encoding the client asked for, and only the
 * model name and the usage (what was charged) are the gateway's.
 *
 * `base64` is the vector's float32 values, little-endian, base64-encoded: what OpenAI sends and
 * what the openai SDK decodes (`new Float32Array(Buffer.from(s, "base64").buffer)`). An upstream
 * that ignored the asked encoding (some compatible servers always answer floats) is converted
 * here, so a client never gets a shape it did not ask for: the SDK asks for base64 by default and
 * would decode an array as garbage.
 */

export type EmbeddingEncoding = "float" | "base64";

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/**
 * Dimensions of one vector as an upstream sent it (a non-empty array of numbers, or base64 of
 * whole float32 values), or undefined when it is neither.
 */
export function vectorLength(embedding: unknown): number | undefined {
  if (Array.isArray(embedding)) {
    if (embedding.length === 0) return undefined;
    // Float32 values, as vendors make them: past FLT_MAX a number would be Infinity to a base64 client.
    for (const x of embedding) if (typeof x !== "number" || !Number.isFinite(Math.fround(x))) return undefined;
    return embedding.length;
  }
  if (typeof embedding !== "string" || embedding.length === 0 || embedding.length % 4 !== 0 || !BASE64.test(embedding)) return undefined;
  const padding = embedding.endsWith("==") ? 2 : embedding.endsWith("=") ? 1 : 0;
  const bytes = (embedding.length / 4) * 3 - padding;
  if (bytes % 4 !== 0) return undefined;
  // NaN or Infinity in base64 would reach a float client as null (JSON has neither).
  const values = Buffer.from(embedding, "base64");
  const view = new DataView(values.buffer, values.byteOffset, values.byteLength);
  for (let i = 0; i + 4 <= values.byteLength; i += 4) if (!Number.isFinite(view.getFloat32(i, true))) return undefined;
  return bytes / 4;
}

/** Float32 values, little-endian, as base64. */
export function float32Base64(values: readonly number[]): string {
  const bytes = Buffer.alloc(values.length * 4);
  for (let i = 0; i < values.length; i++) bytes.writeFloatLE(values[i]!, i * 4);
  return bytes.toString("base64");
}

/** The numbers base64 float32 (little-endian) holds, as the openai SDK decodes them. */
export function base64Float32(text: string): number[] {
  const bytes = Buffer.from(text, "base64");
  const values = new Array<number>(bytes.length >> 2);
  for (let i = 0; i < values.length; i++) values[i] = bytes.readFloatLE(i * 4);
  return values;
}

function encoded(embedding: unknown, encoding: EmbeddingEncoding): unknown {
  if (encoding === "base64") return typeof embedding === "string" ? embedding : float32Base64(embedding as number[]);
  return Array.isArray(embedding) ? embedding : base64Float32(embedding as string);
}

/**
 * The client's answer from the upstream's body (already checked: one vector per input, indexes
 * 0…n−1), or the answer the embeddings thread wrote from a large one (embeddings-thread.ts).
 * `usage` is the charged count, from the last usage event (the upstream's, or the gateway's
 * estimate when it reported none).
 */
export function encodeEmbeddingsBody(upstream: unknown, events: StreamEvent[], ctx: EncodeContext, encoding: EmbeddingEncoding): Record<string, unknown> | JsonText | Promise<JsonText> {
  let promptTokens = 0;
  for (const e of events) if (e.type === "usage" && e.inputTokens !== undefined) promptTokens = e.inputTokens;
  if (upstream instanceof WrittenEmbeddings) return upstream.withUsage(promptTokens, ctx.model);
  return embeddingsList(upstream, ctx.model, encoding, embeddingsUsage(promptTokens));
}

/** OpenAI's usage of an embeddings answer: its prompt tokens, which are all its tokens. */
export function embeddingsUsage(promptTokens: number): { prompt_tokens: number; total_tokens: number } {
  return { prompt_tokens: promptTokens, total_tokens: promptTokens };
}

/**
 * The list as the client gets it: the upstream's fields (in its order), items in index order in
 * the asked encoding, the gateway's model id and `usage`.
 */
export function embeddingsList(upstream: unknown, model: string, encoding: EmbeddingEncoding, usage: unknown): Record<string, unknown> {
  const body = upstream as Record<string, unknown> & { data: Record<string, unknown>[] };
  const data = body.data
    .map((item): Record<string, unknown> => ({ ...item, object: "embedding", embedding: encoded(item.embedding, encoding) }))
    .sort((a, b) => (a.index as number) - (b.index as number));
  return { ...body, object: "list", data, model, usage };
}

/**
 * An answer checked and written on the embeddings thread (embeddings-thread.ts): the client's
 * JSON as text, written with the count the upstream reported (or 0 when it reported none usable),
 * and where in the text that usage sits. The request thread only hands the text on; another count
 * (the meter's estimate) is put in on the thread too, so the request thread never copies the text.
 */
export class WrittenEmbeddings {
  constructor(
    /** The model id the text names (the candidate's, as the answer's `ctx.model` is). */
    readonly model: string,
    /** The count the upstream reported, which the text says; undefined when it reported none usable. */
    readonly reported: number | undefined,
    readonly text: string,
    /** The usage object's place in `text`: [start, end). */
    readonly usageAt: readonly [number, number],
    /** Rewrites the usage on the thread: `text` with [start, end) replaced by `usage`. */
    private readonly splice: (text: string, at: readonly [number, number], usage: string) => Promise<string>,
  ) {}

  withUsage(promptTokens: number, model: string): JsonText | Promise<JsonText> {
    // Both come from the same candidate: a mismatch is a wiring mistake, not an upstream's.
    if (model !== this.model) throw new Error(`the embeddings answer was written for ${this.model}, not ${model}`);
    if (promptTokens === this.reported) return new JsonText(this.text);
    return this.splice(this.text, this.usageAt, JSON.stringify(embeddingsUsage(promptTokens))).then((text) => new JsonText(text));
  }
}
