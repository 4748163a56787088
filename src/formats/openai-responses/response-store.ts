import type { Json } from "../common/wire-types.ts";

/**
 * The ResponseStore port: what the Responses API keeps of an answer so that a later request can
 * refer to it — `item_reference` input items (the AI SDK's default `openai()` provider sends its
 * earlier answers that way) and `previous_response_id` — and so the account can read it back
 * (`GET /v1/responses/{id}`) or delete it. Owned here, where references are resolved;
 * `store/memory/memory-response-store.ts` implements it in the process's memory and
 * `store/redis/redis-response-store.ts` in Redis, shared by every gateway process
 * (docs/decisions.md, "Responses API" and "Stored answers per account").
 *
 * Everything is scoped: an account sees only what its own requests stored. Every byte kept
 * counts against the account's quota: the request's input items (reasoning `encrypted_content`
 * included) and the whole answer as returned.
 */
export interface ResponseStore {
  /** False when storage is switched off (`responses.store_max_bytes: 0`): nothing is kept or found. */
  readonly enabled: boolean;
  /** Largest answer kept, in bytes of its stored JSON; a request whose input alone is larger is refused. */
  readonly maxAnswerBytes: number;
  /** An output item of an earlier stored answer, as a fresh copy; undefined when unknown or expired. */
  item(scope: string, id: string): Promise<Json | undefined>;
  /** An earlier stored answer, as a fresh copy (of its Response, `output` only); undefined when unknown or expired. */
  response(scope: string, id: string, maxBytes?: number): Promise<StoredResponse | undefined>;
  /** The stored answer's Response object as JSON text, exactly as it was returned; undefined when unknown or expired. */
  body(scope: string, id: string): Promise<string | undefined>;
  /**
   * Keeps a finished answer under its id (its output items are found through it). False, keeping
   * nothing, when it is larger than `maxAnswerBytes` or than the account's quota.
   */
  keep(scope: string, id: string, response: StoredResponse): Promise<boolean>;
  /** Forgets an answer; false when the account held no such answer. */
  delete(scope: string, id: string): Promise<boolean>;
}

/** The store cannot answer now (Redis unreachable or too slow): the request gets a 503 that says so. */
export class ResponseStoreUnavailableError extends Error {}

/** One stored answer: what a request naming it as `previous_response_id` continues from. */
export interface StoredResponse {
  /**
   * The answer this one continued (its own request's `previous_response_id`): a chain is stored
   * link by link, each turn once, and walked back when continued.
   */
  previous?: string;
  /** The request's own input items, references resolved. `instructions` are not carried over (as at OpenAI). */
  input: Json[];
  /** Characters of its stored JSON (input and Response), when read back: what a chain weighs. */
  bytes?: number;
  /** The Response object as it was returned (`output` holds the answer's items); read back, its items alone. */
  response: Json & { output: Json[] };
}

/** The answer an output item belongs to: items are named `<kind>_<answer>_<n>` (encode-responses.ts), answers `resp_<answer>`. */
export function answerIdOfItem(itemId: string): string | undefined {
  const match = /^[a-z]+_(.+)_\d+$/.exec(itemId);
  return match ? `resp_${match[1]}` : undefined;
}

/** Bookkeeping per stored answer (key, maps, numbers), counted beside its JSON so tiny answers are not free. */
export const ENTRY_OVERHEAD_BYTES = 96;

/** What an answer costs against its account's quota: its JSON text in UTF-8, its id and the overhead. */
export function storedBytes(id: string, inputJson: string, responseJson: string): number {
  return Buffer.byteLength(inputJson) + Buffer.byteLength(responseJson) + id.length + ENTRY_OVERHEAD_BYTES;
}

/**
 * An answer as both stores keep it, as JSON text: `input` holds `{previous?, input, out}`, `response`
 * the Response object exactly as it was returned. `out` is where `output` stands in that text, so
 * a reference or a chain reads the answer's items without parsing the rest of it: the Response
 * echoes the request's tools, and three stored answers of 4.5 million numbers each cost every
 * 327-byte request that referred to them 0.3–0.4 s of parsing (an audit).
 */
export function storedTexts(stored: StoredResponse): { input: string; response: string } {
  const output = JSON.stringify(stored.response.output);
  // The head with a mark where the items go: the same keys in the same order as the whole.
  const placeholder = `items-${Bun.randomUUIDv7("hex")}`;
  const mark = JSON.stringify(placeholder);
  const head = JSON.stringify({ ...stored.response, output: placeholder });
  const at = head.indexOf(mark);
  const response = head.slice(0, at) + output + head.slice(at + mark.length);
  const input = JSON.stringify({ ...(stored.previous ? { previous: stored.previous } : {}), input: stored.input, out: [at, at + output.length] });
  return { input, response };
}

/** A kept answer read back: its input, and its output items alone (the rest of the Response is not parsed). */
export function storedAnswer(inputText: string, responseText: string, maxBytes = Number.POSITIVE_INFINITY): StoredResponse {
  // Weighed before it is parsed: parsing is the cost (stored-input.ts, chain).
  const bytes = inputText.length + responseText.length;
  if (bytes > maxBytes) throw new StoredTooLargeError(bytes);
  const { previous, input, out } = JSON.parse(inputText) as { previous?: string; input: Json[]; out?: [number, number] };
  // Answers kept before `out` was (a store shared across an upgrade) are parsed whole.
  const output = (out ? JSON.parse(responseText.slice(out[0], out[1])) : (JSON.parse(responseText) as { output: Json[] }).output) as Json[];
  const stored: StoredResponse = { ...(previous ? { previous } : {}), input, response: { output } };
  // Beside the answer, not in it: what is written or compared of a stored answer stays its JSON's shape.
  Object.defineProperty(stored, "bytes", { value: bytes, enumerable: false });
  return stored;
}

/** A stored answer larger than a request may read (stored-input.ts, chain): its size, in characters of its stored JSON. */
export class StoredTooLargeError extends Error {
  constructor(readonly bytes: number) {
    super(`a stored answer of ${bytes} bytes`);
  }
}

/** Storage switched off: every lookup misses, nothing is kept. */
export const NO_RESPONSE_STORE: ResponseStore = {
  enabled: false,
  maxAnswerBytes: 0,
  item: async () => undefined,
  response: async () => undefined,
  body: async () => undefined,
  keep: async () => false,
  delete: async () => false,
};
