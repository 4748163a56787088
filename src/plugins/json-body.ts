import { Elysia } from "elysia";
import { GatewayError } from "../pipeline/gateway-error.ts";

/** Deeper than any chat request needs; deep enough that no real tool schema is refused. */
export const MAX_JSON_DEPTH = 64;

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * How deeply a JSON text nests, outside strings, in one pass over the characters. Only used to
 * word the refusal of a text JSON.parse rejected: a walk of the parsed value is much cheaper
 * (see deeperThan).
 */
export function nestingDepth(text: string, limit: number): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92 /* \ */) i++;
      else if (c === 34 /* " */) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 123 /* { */ || c === 91 /* [ */) {
      if (++depth > max && (max = depth) > limit) return max;
    } else if (c === 125 || c === 93) depth--;
  }
  return max;
}

/**
 * Whether a parsed JSON value nests more than `limit` levels (objects and arrays; the top one is
 * level 1). JSON.parse itself copes with 100,000 levels, but everything after it (validation,
 * error reports, re-serialising for the upstream) walks the value recursively, slowly or to a
 * stack overflow. The walk visits containers only and stops at the limit, so it costs a few
 * microseconds for a 200 KB conversation, where scanning the text's characters cost 300.
 */
export function deeperThan(value: object, limit: number): boolean {
  if (limit === 0) return true;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const item: unknown = value[i];
      if (typeof item === "object" && item !== null && deeperThan(item, limit - 1)) return true;
    }
    return false;
  }
  for (const key in value) {
    const item: unknown = (value as Record<string, unknown>)[key];
    if (typeof item === "object" && item !== null && deeperThan(item, limit - 1)) return true;
  }
  return false;
}

/**
 * JSON bodies are read strictly: invalid UTF-8 is refused rather than silently turned into
 * U+FFFD (which would send text to the model that the client never wrote), and so is nesting
 * deeper than MAX_JSON_DEPTH. Every failure is a 400 in the client's error shape.
 */
export function jsonBodyPlugin(maxBytes: number) {
  return new Elysia({ name: "switchyard/json-body" }).onParse({ as: "global" }, async ({ request, contentType }) => {
    if (!contentType || !contentType.startsWith("application/json")) return;
    const bytes = await readCapped(request, maxBytes);
    let text: string;
    try {
      text = strictUtf8.decode(bytes);
    } catch {
      throw new GatewayError(400, "invalid_request", "The request body is not valid UTF-8.");
    }
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      throw nestingDepth(text, MAX_JSON_DEPTH) > MAX_JSON_DEPTH ? tooDeep() : new GatewayError(400, "invalid_request", "The request body is not valid JSON.");
    }
    if (typeof value === "object" && value !== null && deeperThan(value, MAX_JSON_DEPTH)) throw tooDeep();
    return value;
  });
}

const tooDeep = () => new GatewayError(400, "invalid_request", `The request body nests deeper than ${MAX_JSON_DEPTH} levels.`);

/** The body, read no further than the limit: a body sent without Content-Length is measured here. */
async function readCapped(request: Request, maxBytes: number): Promise<Uint8Array> {
  if (!request.body) return new Uint8Array(0);
  // With a Content-Length (already checked against the limit) Bun delivers exactly that many
  // bytes, and its native read skips the stream machinery that costs ~20 µs per request.
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) <= maxBytes) return new Uint8Array(await request.arrayBuffer());
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of request.body) {
    size += chunk.byteLength;
    if (size > maxBytes) throw new GatewayError(413, "request_too_large", `The request body is over the limit of ${maxBytes} bytes.`);
    chunks.push(chunk);
  }
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
}
