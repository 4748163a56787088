import { workerUrl } from "../worker-url.ts";

/**
 * Token counts for answers whose upstream reported none, and for prompts that come near a
 * context window. The BPE tables (`gpt-tokenizer`, o200k) take over a second to load and about
 * 90 MB of heap, so they live in a worker thread, started with the app:
 * - the request thread's heap stays small. JavaScriptCore sizes its young generation by the
 *   heap, and with the tables on the request thread every request paid for it: 67–71 against
 *   62–63 µs of CPU per non-stream response on the bench's loopback (docs/benchmarks.md);
 * - counting a long text runs beside the event loop instead of on it.
 * If the worker cannot be started or dies, counts fall back to a bytes-per-token rule of thumb
 * (the result is an estimate either way, and recorded as one); the next count starts a new worker.
 *
 * Two lanes share the one thread: `count` (chat admission near a context window, which takes
 * turns per key in a count queue of its own, and usage for billing) goes to the worker at once, a
 * 64 Ki piece at a time; `countWhenIdle` (free counts, limits/count-queue.ts) goes only when
 * nothing else is in the worker, one at a time. A paid request's count thus waits for at most the
 * one free slice being counted, never for a queue of them. One thread, not two: a second copy of
 * the tables would cost another ~90 MB per process.
 */
const WORKER_URL = workerUrl("billing/tokenizer-worker.ts");

/** Counts a text's tokens (o200k); an estimate when the tokenizer cannot run. */
export type TokenCounter = (text: string) => Promise<number>;

export interface Tokenizer {
  count: TokenCounter;
  /**
   * A count that yields to every `count`: sent to the worker only when it holds nothing else.
   * For work nobody pays for; callers keep each text short (a slice), since once sent it runs to its end.
   */
  countWhenIdle: TokenCounter;
  /** Starts the tokenizer's thread (and its table load) now, so the first count does not wait. */
  load(): void;
  /**
   * From now on every count is the rule of thumb, and the counts waiting are answered with it at
   * once (the thread ends). For a gateway that is stopping: an answer cut at the end of its grace
   * settles only once its counts are in, and in a process just started on a busy host the tables
   * take more than the second the stop gives it to load, so its charge was lost at exit.
   */
  hurry(): void;
}

/** Characters of a text the tokenizer's thread counts in one message (a few ms of its time at worst). */
const PIECE_CHARS = 64 * 1024;

/**
 * Where a piece of `text` starting at `from` ends: `size` characters on, or before the last space
 * in the piece's second half, where the tokenizer starts a word anyway, so a cut splits no token
 * of prose (tokenizer-worker.ts slices the same way).
 */
export function pieceEnd(text: string, from: number, size: number): number {
  const end = Math.min(from + size, text.length);
  if (end === text.length) return end;
  // Looked for in the piece's second half only: `lastIndexOf` alone scans back to the text's start
  // when a run has no space, every piece of a 10 MB run.
  for (let at = end, half = from + size / 2; at > half; at--) if (text.charCodeAt(at) === 32) return at;
  return end;
}

/** About 4 bytes a token in English prose, fewer elsewhere: only used when the tokenizer is unavailable. */
export function roughTokenCount(text: string): number {
  return Math.ceil(Buffer.byteLength(text) / 4);
}

/**
 * One tokenizer per gateway, created by app.ts and passed to whoever counts (the meters, the
 * plan's context fit, token counts, embeddings): its worker and the counts in flight are its own.
 */
export function createTokenizer(): Tokenizer {
  let worker: Worker | undefined;
  let nextId = 1;
  /** hurry() was called: no thread is started again, every count is the rule of thumb. */
  let hurried = false;
  /** Counts in flight; each keeps the rough count to fall back on, not its text (that went to the worker). */
  const waiting = new Map<number, { rough: number; resolve: (count: number) => void }>();
  /** Low-priority counts not yet given to the worker, oldest first. */
  const idle: { text: string; resolve: (count: number) => void }[] = [];

  const giveUp = (): void => {
    const w = worker;
    worker = undefined;
    w?.terminate();
    for (const { rough, resolve } of waiting.values()) resolve(rough);
    waiting.clear();
    sendIdle();
  };

  /** Gives the worker the oldest low-priority count, if nothing else is in it. */
  const sendIdle = (): void => {
    // Without a worker a count resolves at once (rough) and the next one may go.
    while (waiting.size === 0 && idle.length > 0) {
      const next = idle.shift()!;
      void count(next.text).then(next.resolve);
    }
  };

  const startWorker = (): Worker | undefined => {
    try {
      const w = new Worker(WORKER_URL);
      // An idle tokenizer must not keep the process (or a test run) alive.
      w.unref();
      w.onmessage = (event: MessageEvent<{ id: number; count: number }>) => {
        const { id, count } = event.data;
        const entry = waiting.get(id);
        if (!entry) return;
        waiting.delete(id);
        entry.resolve(count);
        if (waiting.size === 0) {
          w.unref();
          sendIdle();
        }
      };
      w.onerror = () => giveUp();
      w.addEventListener("close", () => {
        if (worker === w) giveUp();
      });
      return w;
    } catch {
      return undefined;
    }
  };

  /**
   * A long text goes to the thread a piece at a time, each sent when the last is counted, so
   * other counts sent meanwhile are answered between its pieces: one 10 MB prompt whose upstream
   * reported no usage held every billing count behind it (a hostile-tenant probe, 2026-11-30).
   */
  const count = async (text: string): Promise<number> => {
    if (text.length <= PIECE_CHARS) return countOne(text);
    let total = 0;
    for (let i = 0; i < text.length; ) {
      const end = pieceEnd(text, i, PIECE_CHARS);
      total += await countOne(text.slice(i, end));
      i = end;
    }
    return total;
  };

  const countOne = (text: string): Promise<number> => {
    if (text.length === 0) return Promise.resolve(0);
    if (!hurried) worker ??= startWorker();
    const w = worker;
    if (!w) return Promise.resolve(roughTokenCount(text));
    return new Promise((resolve) => {
      const id = nextId++;
      waiting.set(id, { rough: roughTokenCount(text), resolve });
      // A count in flight keeps the process alive until it is answered.
      w.ref();
      w.postMessage({ id, text });
    });
  };

  return {
    load() {
      if (!hurried) worker ??= startWorker();
    },
    hurry() {
      hurried = true;
      giveUp();
    },
    count,
    countWhenIdle(text) {
      if (text.length === 0) return Promise.resolve(0);
      return new Promise((resolve) => {
        idle.push({ text, resolve });
        sendIdle();
      });
    },
  };
}

/**
 * A cheap bound on prompt tokens for reservations, run on every request: byte-level BPE never
 * yields more tokens than bytes, and real text averages 3–4 bytes a token, so bytes / 2 plus
 * framing per message covers code, CJK and prose without reserving 4× too much.
 */
export function promptTokenBound(textBytes: number, messages: number): number {
  return Math.ceil(textBytes / 2) + 8 * messages + 8;
}

/**
 * What a prompt can cost at most, for the hold: byte-level BPE never yields more tokens than
 * bytes, so the body's bytes (plus framing per message) bound every tokenizer's count. The cheap
 * bound above (bytes / 2) is right for fitting a context window (the upstream refuses the rare
 * prompt it lets through), but not for money: the charge is capped at the hold, and prompts of
 * about a token a byte (digits and punctuation, CJK and emoji) were charged 33–67 % of the
 * vendor's count (a tenant probe, 2026-11-29).
 */
export function promptTokenCeiling(textBytes: number, messages: number): number {
  return textBytes + 8 * messages + 8;
}

/**
 * What a vendor may add to a prompt beyond the body's own text, counted in its input: Anthropic's
 * tool-use system prompt (313–346 tokens with the Claude 4 models), the framing of tools and
 * messages past the ceiling's 8 a message. A reported prompt is billed at most the ceiling plus
 * this: an upstream reporting 99,999,000 cached tokens for "hi" took the request's whole hold,
 * its unused answer included (a raw-TCP probe, 2026-11-30).
 */
export const VENDOR_PROMPT_ALLOWANCE = 1024;

/**
 * What a vendor adds for each tool it defines itself (Anthropic's `bash_…`, `text_editor_…`,
 * `computer_…`, `memory_…`), whose schema and instructions are not in the body: the computer tool
 * is ~735 tokens and a 466–499-token system prompt.
 */
export const VENDOR_TOOL_ALLOWANCE = 2048;

/**
 * The tools a vendor defines and the client runs (Anthropic's, versioned: `bash_20250124`); any
 * other type is the client's own (its schema is in the body) or refused by the vendor, and a
 * request declaring a thousand odd types is not held for two million tokens.
 */
const VENDOR_DEFINED_TOOL = /^(?:bash|text_editor|computer|memory)_\d{8}$/;

/** The prompt tokens the vendor's own tools of a request add (VENDOR_TOOL_ALLOWANCE each): held for, and billed. */
export function vendorToolsAllowance(body: Record<string, unknown>): number {
  let defined = 0;
  if (Array.isArray(body.tools)) {
    for (const tool of body.tools) {
      const type = (tool as { type?: unknown } | null)?.type;
      if (typeof type === "string" && VENDOR_DEFINED_TOOL.test(type)) defined++;
    }
  }
  return defined * VENDOR_TOOL_ALLOWANCE;
}

/** The prompt tokens a vendor may add to a request beyond its body's own: VENDOR_PROMPT_ALLOWANCE and its own tools'. */
export function vendorPromptAllowance(body: Record<string, unknown>): number {
  return VENDOR_PROMPT_ALLOWANCE + vendorToolsAllowance(body);
}
