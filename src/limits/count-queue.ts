import { createFairQueue } from "./fair-queue.ts";
import { pieceEnd } from "../billing/token-estimate.ts";
import type { SliceCountMemory } from "../billing/slice-count-memory.ts";

/**
 * Free token counts (`POST /v1/messages/count_tokens` answered by the gateway's tokenizer) wait
 * here for the tokenizer, so that one key cannot starve the others nor the paid path:
 * - per key, at most `perKeyBytes` of text queued or running, and as much per account (its keys
 *   together, `perAccountBytes`): more is refused (429) at once;
 * - all keys, at most `capacityBytes`: more is refused (503) rather than held without bound;
 *   each count weighs its UTF-8 bytes but at least one slice, so the caps bound the tokenizer's
 *   work and the texts held, and a key may still send dozens of small counts at once (Claude
 *   Code's `/context`); a key with nothing queued may always queue one count;
 * - accounts take turns, and each account's keys within its turns (limits/fair-queue.ts): five
 *   keys of one account flooding counts took another tenant's median from 4 to 76 ms when each
 *   key took a turn of its own (a hostile-tenant probe, 2026-11-30). A turn is one slice of `sliceChars` characters
 *   of a text, so a key's 4 MB prompt delays another key's 8-token count by one slice, not by
 *   the whole prompt;
 * - a count that has not finished within `timeoutMs` of arriving is given up (503);
 * - `count` is the tokenizer's low-priority lane (billing/token-estimate.ts, Tokenizer.countWhenIdle),
 *   which gives each slice to the tokenizer only when no chat or billing count is waiting.
 * Slices end where the tokenizer's own pieces do (billing/token-estimate.ts, `pieceEnd`), so the
 * sum is what one count of the whole text gives.
 * - with `remembered`, the slices an account had counted lately are not counted again: a text
 *   that starts as one counted before (an agent's next turn) is counted from where they end, and
 *   one counted whole is answered without a turn.
 */

export interface CountQueueOptions {
  perKeyBytes: number;
  /** One account's keys together (default: no bound of their own); a key's share, so more keys buy an account no more. */
  perAccountBytes?: number;
  capacityBytes: number;
  timeoutMs: number;
  /** Counts one slice of text; may be slow, must not reject for an ordinary text. */
  count: (text: string) => Promise<number>;
  /** Characters per turn (default 64 Ki, 32 of the tokenizer's slices: a few ms of its time). */
  sliceChars?: number;
  /** Counts of slices each account had counted lately (billing/slice-count-memory.ts). */
  remembered?: SliceCountMemory;
}

export type CountRefusal = "key_busy" | "queue_full" | "timeout" | "aborted";

/** Why a count was not made: the route turns it into the client's 429, 503 or 499. */
export class CountRefusedError extends Error {
  constructor(readonly reason: CountRefusal, message: string) {
    super(message);
  }
}

export interface CountQueue {
  /**
   * The tokens of `text`, counted in turn with other keys' counts. With `limit`, the count stops
   * at the first slice that takes it past the limit and answers what it has (more than `limit`):
   * whoever asks only needs to know that the text does not fit.
   */
  count(key: string, text: string, signal?: AbortSignal, limit?: number, account?: string): Promise<number>;
  /**
   * Why `key`'s next count would be refused (its counts leave no room for one slice, or for the
   * request's body: `bodyBytes`, its Content-Length, bounds its text), or undefined: asked when a
   * request arrives, so a flood is refused before its body is read. Sized to just fit what is
   * left, a flood of large prompts was let in, read and parsed (4 MB each on the request thread),
   * and only then refused.
   */
  busy(key: string, bodyBytes?: number, account?: string): string | undefined;
  /** Counts queued or running, all keys. */
  readonly size: number;
  /** Their weight (bytes of text, at least a slice each). */
  readonly bytes: number;
  /** Counts queued or running for `key`. */
  sizeOf(key: string): number;
}

interface Job {
  text: string;
  /** Whose slices these are: the account's, else the key's. */
  owner: string;
  /** Characters counted so far. */
  done: number;
  tokens: number;
  /** Stop once past this many tokens (see CountQueue.count). */
  limit: number;
  finished: boolean;
  timer?: ReturnType<typeof setTimeout>;
  onAbort?: () => void;
  signal?: AbortSignal;
  resolve(tokens: number): void;
  reject(error: unknown): void;
}

const DEFAULT_SLICE_CHARS = 32 * 2048;

export function createCountQueue(o: CountQueueOptions): CountQueue {
  const queue = createFairQueue<Job>({ capacity: o.capacityBytes, perKey: o.perKeyBytes, perGroup: o.perAccountBytes });
  const perAccount = o.perAccountBytes ?? Number.POSITIVE_INFINITY;
  const slice = o.sliceChars ?? DEFAULT_SLICE_CHARS;
  let pumping = false;
  const keyBusy = `Too many token counts in progress for this key: at most ${o.perKeyBytes} bytes of text at once. Retry when one has finished.`;

  function finish(key: string, job: Job, outcome: { tokens: number } | { error: unknown }): void {
    if (job.finished) return;
    job.finished = true;
    queue.remove(key, job);
    clearTimeout(job.timer);
    if (job.onAbort) job.signal?.removeEventListener("abort", job.onAbort);
    job.text = "";
    if ("tokens" in outcome) job.resolve(outcome.tokens);
    else job.reject(outcome.error);
  }

  /** One slice at a time, whoever's turn it is, until nothing is queued. */
  async function pump(): Promise<void> {
    if (pumping) return;
    pumping = true;
    try {
      for (let turn = queue.next(); turn; turn = queue.next()) {
        const { key, item: job } = turn;
        let tokens: number;
        const end = pieceEnd(job.text, job.done, slice);
        try {
          const piece = job.text.slice(job.done, end);
          tokens = await o.count(piece);
          o.remembered?.remember(job.owner, piece, tokens);
        } catch (error) {
          finish(key, job, { error });
          continue;
        }
        // Given up (timed out, client gone) while its slice was counted.
        if (job.finished) continue;
        job.tokens += tokens;
        job.done = end;
        if (job.done >= job.text.length || job.tokens > job.limit) finish(key, job, { tokens: job.tokens });
      }
    } finally {
      pumping = false;
    }
  }

  return {
    count(key, text, signal, limit = Number.POSITIVE_INFINITY, account) {
      if (text.length === 0) return Promise.resolve(0);
      if (signal?.aborted) return Promise.reject(new CountRefusedError("aborted", "The client closed the request."));
      const owner = account ?? key;
      // What this account had counted lately is not counted again; from the first slice that is new, the count takes turns.
      let done = 0;
      let known = 0;
      while (o.remembered && done < text.length && known <= limit) {
        const end = pieceEnd(text, done, slice);
        const tokens = o.remembered.recall(owner, text.slice(done, end));
        if (tokens === undefined) break;
        known += tokens;
        done = end;
      }
      if (done >= text.length || known > limit) return Promise.resolve(known);
      const rest = done === 0 ? text : text.slice(done);
      return new Promise<number>((resolve, reject) => {
        const job: Job = { text, owner, done, tokens: known, limit, finished: false, resolve, reject };
        // Turns per account (one account's many keys share one turn), caps per key.
        const pushed = queue.push(key, job, Math.max(slice, Buffer.byteLength(rest)), account);
        if (pushed === "key_full") return reject(new CountRefusedError("key_busy", keyBusy));
        if (pushed === "queue_full") {
          return reject(new CountRefusedError("queue_full", "The gateway's tokenizer has too many counts waiting. Retry in a moment."));
        }
        job.timer = setTimeout(() => finish(key, job, { error: new CountRefusedError("timeout", `The token count waited more than ${o.timeoutMs} ms for the tokenizer. Retry in a moment.`) }), o.timeoutMs);
        if (signal) {
          job.signal = signal;
          job.onAbort = () => finish(key, job, { error: new CountRefusedError("aborted", "The client closed the request.") });
          signal.addEventListener("abort", job.onAbort, { once: true });
        }
        void pump();
      });
    },
    busy(key, bodyBytes = 0, account) {
      const need = Math.max(slice, bodyBytes);
      const held = queue.weightOf(key);
      if (held > 0 && held + need > o.perKeyBytes) return keyBusy;
      const accountHeld = account === undefined ? 0 : queue.weightOfGroup(account);
      return accountHeld > 0 && accountHeld + need > perAccount ? keyBusy : undefined;
    },
    get size() {
      return queue.size;
    },
    get bytes() {
      return queue.weight;
    },
    sizeOf(key) {
      return queue.sizeOf(key);
    },
  };
}
