/**
 * Issue 32 item 3 on loopback: one key's flood of free token counts (each a prompt of ~4 MB,
 * about 60 of the count queue's slices) does not hold up another key's small count, nor a chat
 * request that needs the tokenizer to fit its context window; the flood past the key's cap is
 * refused at once, and a prompt over the free counting size is refused with Anthropic's 413.
 */
import { afterEach, beforeAll, describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { FREE_MODEL, OPENAI_MODEL, useGateway } from "../helpers/gateway.ts";
import { rawUpload } from "../helpers/raw-upload.ts";

/** The flood: this many big counts of ~4 MB, which the key's byte cap holds and not one small count more. */
const PER_KEY = 4;
const PER_KEY_BYTES = PER_KEY * 4_000_000 + 65_535;
const upstream = useFakeUpstream();
// The floods here are about the tokenizer's queue, not the bytes a minute (count-bytes.test.ts): that bucket is made large.
const gw = useGateway(() => ({ upstreamUrl: upstream.url, limits: { count_tokens_per_key_bytes: PER_KEY_BYTES, count_tokens_account_bytes_per_minute: 4 * 1024 * 1024 * 1024 } }));
/** The flooding tenant: another account and key. */
const flooder = { key: "", keyId: "" };
beforeAll(async () => {
  const account = await gw.app.services.accounts.createAccount("flooder", 1_000_000_000);
  const issued = (await gw.app.services.accounts.createKey(account.id, "flood"))!;
  flooder.key = issued.key;
  flooder.keyId = issued.id;
});

/** A count on a model whose upstream cannot count (an OpenAI one): the gateway's tokenizer answers. */
function count(key: string, text: string): Promise<Response> {
  return fetch(`${gw.url}/v1/messages/count_tokens`, {
    method: "POST",
    headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
    body: JSON.stringify({ model: OPENAI_MODEL, messages: [{ role: "user", content: text }] }),
  });
}

/**
 * 4,000,000 bytes of prompt, just under the default count_tokens_max_bytes (4 MiB), each one
 * new and no two of its slices alike: slices an account had counted are not counted again
 * (billing/slice-count-memory.ts), and a flood of one text repeated would cost one slice.
 */
let bigs = 0;
const big = (n = bigs++) => Array.from({ length: 800 }, (_, j) => `${"word ".repeat(999)}w${n}x${j}`.padEnd(4_999) + " ").join("");

/** Starts the flood (`size` big counts, PER_KEY by default) and resolves once every one of them waits in the count queue. */
async function flood(answered: string[], size = PER_KEY): Promise<Promise<unknown>[]> {
  const counts = Array.from({ length: size }, (_, i) =>
    count(flooder.key, big()).then(async (res) => {
      expect(res.status).toBe(200);
      await res.json();
      answered.push(`flood${i}`);
    }),
  );
  // (Should one of them be answered before the last is queued, the test fails here rather than waiting forever.)
  while (gw.app.services.counts.sizeOf(flooder.keyId) < size && answered.length === 0) await Bun.sleep(1);
  expect(answered).toEqual([]);
  return counts;
}

describe("one key's count flood", () => {
  // Each test starts with an empty queue, even after one that failed before its flood was answered.
  afterEach(async () => {
    while (gw.app.services.counts.size > 0) await Bun.sleep(5);
  });

  test("another key's small count is answered before any of the flood", async () => {
    const answered: string[] = [];
    const flooding = await flood(answered);
    const res = await count(gw.key, "How many tokens is this?");
    answered.push("small");
    expect(res.status).toBe(200);
    expect(((await res.json()) as { input_tokens: number }).input_tokens).toBeGreaterThan(0);
    await Promise.all(flooding);
    expect(answered[0]).toBe("small");
    expect(answered).toHaveLength(PER_KEY + 1);
  });

  /**
   * While the flood waits, `key`'s chat request of 20 KB of prompt on an 8,192-token model (the
   * cheap bound, bytes / 2, does not fit, so it is counted) is answered before any of the flood.
   */
  async function nearWindowChatFirst(key: string): Promise<void> {
    const answered: string[] = [];
    const flooding = await flood(answered);
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: FREE_MODEL, max_tokens: 10, messages: [{ role: "user", content: "hello ".repeat(3400) }] }),
    });
    answered.push("chat");
    expect(res.status).toBe(200);
    await res.json();
    await Promise.all(flooding);
    expect(answered[0]).toBe("chat");
  }

  test("a chat request that needs the tokenizer to fit its context window is answered before any of the flood", () => nearWindowChatFirst(gw.key));

  test("past the key's cap the flood is refused at once with 429, in Anthropic's shape", async () => {
    const answered: string[] = [];
    const flooding = await flood(answered);
    const res = await count(flooder.key, "one more");
    expect(res.status).toBe(429);
    expect(res.headers.get("retry-after")).toBe("1");
    const body = (await res.json()) as { type: string; error: { type: string; message: string } };
    expect(body.type).toBe("error");
    expect(body.error.type).toBe("rate_limit_error");
    expect(body.error.message).toBe(`Too many token counts in progress for this key: at most ${PER_KEY_BYTES} bytes of text at once. Retry when one has finished.`);
    await Promise.all(flooding);
    expect(answered).toHaveLength(PER_KEY);
  });

  // The flooder's own chat, while its free counts fill its share: counted apart, on the tokenizer's
  // own lane, so the free counts' bounds (429 past a key's share, 503 past the queue's) never refuse it.
  test("a chat request's own count is not a free count: with the key's share of free counts full, its near-window chat is still answered", () => nearWindowChatFirst(flooder.key));

  /** The flooder's next count, `total` bytes of body on a raw socket: refused (429) and cut before it is all read. */
  async function refusedOnArrival(total: number, chunked: boolean): Promise<void> {
    const res = await rawUpload({
      port: Number(new URL(gw.url).port),
      path: "/v1/messages/count_tokens",
      headers: { "x-api-key": flooder.key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      total,
      chunked,
    });
    expect(res.status).toBe(429);
    expect(JSON.parse(res.body).error.type).toBe("rate_limit_error");
    expect(res.closedByServer).toBe(true);
    expect(res.sent).toBeLessThan(total);
  }

  test("a key whose counts fill its share is refused on arrival, before its next body is read", async () => {
    const flooding = await flood([]);
    await refusedOnArrival(64 * 1024 * 1024, true);
    await Promise.all(flooding);
  });

  test("a count whose body would not fit what the key's share has left is refused on arrival, whatever room one slice would find", async () => {
    // Three big counts wait: 12 MB of the share held, room for one slice but not for another 4 MB.
    const three = await flood([], PER_KEY - 1);
    // One slice would fit, so the slice rule alone admitted it: its 9 MB were then read (and refused as
    // unreadable JSON, 400). Weighed by its Content-Length, it is refused before a byte is read.
    await refusedOnArrival(9_000_000, false);
    await Promise.all(three);
  });
});

test("a prompt over count_tokens_max_bytes is refused with 413 request_too_large before it is counted", async () => {
  const text = "x".repeat(4 * 1024 * 1024 + 1);
  const res = await count(gw.key, text);
  expect(res.status).toBe(413);
  const body = (await res.json()) as { type: string; error: { type: string; message: string } };
  expect(body.type).toBe("error");
  expect(body.error.type).toBe("request_too_large");
  expect(body.error.message).toBe(`The prompt is too large to count: ${4 * 1024 * 1024 + 1} bytes of text; a token count takes at most ${4 * 1024 * 1024}.`);
  expect(gw.app.services.counts.size).toBe(0);
});

test("a chat prompt far past every window (a megabyte of punctuation) is refused with 400 once its count passes the largest window", async () => {
  const symbols = "!@#$%^&*()-_=+[]{};:,.<>/?~`|";
  let text = "";
  while (text.length < 1_000_000) text += symbols[(text.length * 7919) % symbols.length];
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ models: [FREE_MODEL, OPENAI_MODEL], max_tokens: 10, messages: [{ role: "user", content: text }] }),
  });
  expect(res.status).toBe(400);
  const body = (await res.json()) as any;
  expect(body.error.code).toBe("context_length_exceeded");
  // The count stopped at the first slice past the largest window (128,000 tokens), not at the
  // whole text's ~670,000 (about two tokens for every three characters of punctuation).
  const counted = Number(/resulted in (\d+) tokens/.exec(body.error.message)?.[1]);
  expect(counted).toBeGreaterThan(128_000);
  expect(counted).toBeLessThan(200_000);
  expect(gw.app.services.counts.size).toBe(0);
});

