import type { ResponseStore, StoredResponse } from "../../formats/openai-responses/response-store.ts";
import type { Json } from "../../formats/common/wire-types.ts";
import { createByteLru } from "./byte-lru.ts";

export interface MemoryResponseStoreOptions {
  /** Most bytes of stored JSON held; 0 switches storage off. */
  maxBytes: number;
  /** What is unused for this long can no longer be read (and its memory goes at the next use of the store). */
  ttlMs: number;
  now: () => number;
}

/** Map bookkeeping per entry (key, node, numbers), counted beside the JSON so tiny entries are not free. */
const ENTRY_OVERHEAD = 96;

/**
 * The ResponseStore in this process's memory: one byte-bounded LRU (store/memory/byte-lru.ts)
 * holding answers and their output items as JSON text. Text, because it is what the bound
 * counts exactly, it cannot be changed by whoever reads it (every lookup parses a fresh copy),
 * and it holds no references into request objects. Nothing here is logged or written to disk;
 * a restart forgets everything.
 */
export function createMemoryResponseStore(o: MemoryResponseStoreOptions): ResponseStore {
  // One huge request (bodies may be 10 MiB) must not flush everyone else's conversations.
  const lru = createByteLru<string>({ maxBytes: o.maxBytes, ttlMs: o.ttlMs, now: o.now, maxEntryBytes: Math.floor(o.maxBytes / 4) });
  // Ids are ours (time-ordered, with a random part), but scoping keeps one account from ever
  // reading another's answers, whatever it guesses.
  const key = (scope: string, id: string) => `${scope}\u0000${id}`;
  const put = (k: string, value: unknown) => {
    const json = JSON.stringify(value);
    lru.set(k, json, Buffer.byteLength(json) + k.length + ENTRY_OVERHEAD);
  };
  const read = <T>(k: string): T | undefined => {
    const json = lru.get(k);
    return json === undefined ? undefined : (JSON.parse(json) as T);
  };

  return {
    enabled: o.maxBytes > 0,
    item: (scope, id) => read<Json>(key(scope, id)),
    response: (scope, id) => read<StoredResponse>(key(scope, id)),
    keep(scope, id, response) {
      if (o.maxBytes <= 0) return;
      put(key(scope, id), response);
      for (const item of response.output) if (typeof item.id === "string") put(key(scope, item.id), item);
    },
  };
}
