import { answerIdOfItem, storedAnswer, storedBytes, storedTexts, type ResponseStore } from "../../formats/openai-responses/response-store.ts";
import type { Json } from "../../formats/common/wire-types.ts";
import { createAccountQuotaLru } from "./account-quota-lru.ts";

export interface MemoryResponseStoreOptions {
  /** Most bytes of stored JSON held by all accounts together; 0 switches storage off. */
  maxBytes: number;
  /** Most bytes one account holds; its own least recently used answers go first past it. */
  accountMaxBytes: number;
  /** Largest single answer kept (input and Response object as JSON). */
  answerMaxBytes: number;
  /** What is unused for this long can no longer be read (and its memory goes at the next use of the store). */
  ttlMs: number;
  now: () => number;
}

/** One answer as held: JSON text, which the bound counts exactly and no reader can change. */
interface Held {
  /** `{previous?, input, out}` (formats/openai-responses/response-store.ts, storedTexts). */
  input: string;
  /** The Response object as returned; its items answer `item_reference`. */
  response: string;
}

/**
 * The ResponseStore in this process's memory: one byte-bounded LRU per account under a total
 * (store/memory/account-quota-lru.ts), holding each answer once as JSON text. Text, because it
 * is what the bounds count exactly, it cannot be changed by whoever reads it (every lookup
 * parses a fresh copy), and it holds no references into request objects. An output item is
 * found through its answer (its id names it), so it is neither stored nor counted twice.
 * Nothing here is logged or written to disk; a restart forgets everything.
 */
export function createMemoryResponseStore(o: MemoryResponseStoreOptions): ResponseStore {
  const enabled = o.maxBytes > 0;
  const maxAnswerBytes = Math.min(o.answerMaxBytes, o.accountMaxBytes, o.maxBytes);
  const lru = createAccountQuotaLru<Held>({ accountMaxBytes: o.accountMaxBytes, totalMaxBytes: o.maxBytes, ttlMs: o.ttlMs, now: o.now });

  return {
    enabled,
    maxAnswerBytes,
    async item(scope, id) {
      const answer = answerIdOfItem(id);
      const held = answer === undefined ? undefined : lru.get(scope, answer);
      if (!held) return undefined;
      return storedAnswer(held.input, held.response).response.output.find((item: Json) => item.id === id);
    },
    async response(scope, id, maxBytes) {
      const held = lru.get(scope, id);
      return held ? storedAnswer(held.input, held.response, maxBytes) : undefined;
    },
    async body(scope, id) {
      return lru.get(scope, id)?.response;
    },
    async keep(scope, id, stored) {
      if (!enabled) return false;
      const { input, response } = storedTexts(stored);
      const bytes = storedBytes(id, input, response);
      if (bytes > maxAnswerBytes) {
        lru.delete(scope, id);
        return false;
      }
      return lru.set(scope, id, { input, response }, bytes);
    },
    async delete(scope, id) {
      return lru.delete(scope, id);
    },
  };
}
