import type { Json } from "../common/wire-types.ts";

/**
 * The ResponseStore port: what the Responses API keeps of an answer so that a later request can
 * refer to it — `item_reference` input items (the AI SDK's default `openai()` provider sends its
 * earlier answers that way) and `previous_response_id`. Owned here, where references are
 * resolved; `store/memory/memory-response-store.ts` implements it in the process's memory
 * (docs/decisions.md, "Responses API": what is kept, for how long, and why only in memory).
 *
 * Everything is scoped: an account sees only what its own requests stored.
 */
export interface ResponseStore {
  /** False when storage is switched off (`responses.store_max_bytes: 0`): nothing is kept or found. */
  readonly enabled: boolean;
  /** An output item of an earlier stored answer, as a fresh copy; undefined when unknown or expired. */
  item(scope: string, id: string): Json | undefined;
  /** An earlier stored answer, as a fresh copy; undefined when unknown or expired. */
  response(scope: string, id: string): StoredResponse | undefined;
  /** Keeps a finished answer under its id, and each of its output items under the item's id. */
  keep(scope: string, id: string, response: StoredResponse): void;
}

/** One stored answer: what a request naming it as `previous_response_id` continues from. */
export interface StoredResponse {
  /**
   * The answer this one continued (its own request's `previous_response_id`): a chain is stored
   * link by link, each turn once, and walked back when continued.
   */
  previous?: string;
  /** The request's own input items, references resolved. `instructions` are not carried over (as at OpenAI). */
  input: Json[];
  output: Json[];
}

/** Storage switched off: every lookup misses, nothing is kept. */
export const NO_RESPONSE_STORE: ResponseStore = {
  enabled: false,
  item: () => undefined,
  response: () => undefined,
  keep: () => {},
};
