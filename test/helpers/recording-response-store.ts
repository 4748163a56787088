import { createMemoryResponseStore } from "../../src/store/memory/memory-response-store.ts";
import type { ResponseStore } from "../../src/formats/openai-responses/response-store.ts";

/**
 * The gateway's own in-memory response store (default bounds), with what it was asked to keep
 * recorded, and `restart()` to forget everything as a restarted (or another) process would.
 */
export function recordingResponseStore() {
  const fresh = () => createMemoryResponseStore({ maxBytes: 256 * 1024 * 1024, accountMaxBytes: 32 * 1024 * 1024, answerMaxBytes: 16 * 1024 * 1024, ttlMs: 3_600_000, now: Date.now });
  let memory = fresh();
  /** Response ids kept, in order; ids of answers read back (a chain's links), in order. */
  const kept: string[] = [];
  const read: string[] = [];
  const store: ResponseStore = {
    enabled: true,
    get maxAnswerBytes() {
      return memory.maxAnswerBytes;
    },
    item: (scope, id) => memory.item(scope, id),
    response(scope, id) {
      read.push(id);
      return memory.response(scope, id);
    },
    body: (scope, id) => memory.body(scope, id),
    keep(scope, id, response) {
      kept.push(id);
      return memory.keep(scope, id, response);
    },
    delete: (scope, id) => memory.delete(scope, id),
  };
  return {
    store,
    kept,
    read,
    restart() {
      memory = fresh();
    },
  };
}
