/**
 * The Responses API's stored answers: one contract suite run against both stores (this
 * process's memory, and Redis shared by every gateway process) — quotas per account, the total,
 * the per-answer limit, TTL since last use, accounts kept apart, copies, delete — then the
 * resolution of `item_reference` and `previous_response_id` against a store.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { createMemoryResponseStore } from "../../src/store/memory/memory-response-store.ts";
import { createRedisResponseStore } from "../../src/store/redis/redis-response-store.ts";
import { NO_RESPONSE_STORE, ResponseStoreUnavailableError, storedAnswer, storedTexts, type ResponseStore, type StoredResponse } from "../../src/formats/openai-responses/response-store.ts";
import { MAX_REFERENCES, MAX_RESTORED_ANSWERS, resolveStoredInput } from "../../src/formats/openai-responses/stored-input.ts";
import { ResponsesRequestError } from "../../src/formats/openai-responses/responses-to-chat.ts";
import { closedPort, REDIS_URL, redisMissing, useRedisPrefix } from "../helpers/backends.ts";

/** `ticking`: each reading is a millisecond later, so uses are ordered (Redis orders ties by id, memory by call). */
function clock(ticking = false) {
  let now = 1_700_000_000_000;
  return { now: () => (ticking ? now++ : now), advance: (ms: number) => void (now += ms) };
}

const message = (id: string, text: string) => ({ id, type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] });
/** What `response` reads back of a kept answer: its input, and its Response's items alone (the rest, the tools it echoes, is not parsed). */
const readBack = (kept: StoredResponse): StoredResponse => ({ ...kept, response: { output: kept.response.output } });
const turn = (n: number, previous?: string, inputBytes = 0): StoredResponse => ({
  ...(previous ? { previous } : {}),
  input: [{ type: "message", role: "user", content: `question ${n}` }, ...(inputBytes > 0 ? [{ type: "reasoning", id: `rs_in_${n}`, summary: [], encrypted_content: "e".repeat(inputBytes) }] : [])],
  response: { id: `resp_${n}`, object: "response", status: "completed", store: true, output: [message(`msg_${n}_0`, `answer ${n}`)] },
});

interface Bounds {
  maxBytes?: number;
  accountMaxBytes?: number;
  answerMaxBytes?: number;
  ttlMs?: number;
}
const KB = 1_024;

const prefix = useRedisPrefix();
const redisReason = await redisMissing();
const opened: { close(): void }[] = [];
afterAll(() => {
  for (const store of opened) store.close();
});
/** Each Redis store gets a prefix of its own: tests do not see each other's totals. */
let redisStores = 0;

const implementations: [string, (now: () => number, b: Bounds) => ResponseStore][] = [
  ["memory", (now, b) => createMemoryResponseStore({ maxBytes: b.maxBytes ?? 1 << 20, accountMaxBytes: b.accountMaxBytes ?? 1 << 20, answerMaxBytes: b.answerMaxBytes ?? 1 << 20, ttlMs: b.ttlMs ?? 60_000, now })],
];
if (!redisReason) {
  implementations.push([
    "Redis",
    (now, b) => {
      const store = createRedisResponseStore(REDIS_URL, {
        prefix: `${prefix}${++redisStores}:`,
        maxBytes: b.maxBytes ?? 1 << 20,
        accountMaxBytes: b.accountMaxBytes ?? 1 << 20,
        answerMaxBytes: b.answerMaxBytes ?? 1 << 20,
        ttlMs: b.ttlMs ?? 60_000,
        now,
      });
      opened.push(store);
      return store;
    },
  ]);
} else {
  test.skip(`Redis response store: ${redisReason}`, () => {});
}

describe.each(implementations)("%s response store", (_name, open) => {
  /** Waits for a Redis store's connection (the first command otherwise finds it still connecting). */
  const make = async (b: Bounds = {}, c = clock(true)) => {
    const store = open(c.now, b);
    for (let i = 0; i < 100; i++) {
      try {
        await store.body("acct_probe", "resp_probe");
        break;
      } catch (err) {
        if (!(err instanceof ResponseStoreUnavailableError)) throw err;
        await Bun.sleep(20);
      }
    }
    return store;
  };

  test("keeps an answer under its id; its output items are found through it; readers get copies", async () => {
    const store = await make();
    expect(await store.keep("acct_a", "resp_1", turn(1))).toBe(true);
    expect(await store.response("acct_a", "resp_1")).toEqual(readBack(turn(1)));
    expect(JSON.parse((await store.body("acct_a", "resp_1"))!)).toEqual(turn(1).response);
    const item = (await store.item("acct_a", "msg_1_0"))!;
    expect(item).toEqual(message("msg_1_0", "answer 1"));
    // A reader changing what it got changes nothing stored.
    (item.content as { text: string }[])[0]!.text = "tampered";
    expect(await store.item("acct_a", "msg_1_0")).toEqual(message("msg_1_0", "answer 1"));
    expect(await store.item("acct_a", "msg_1_7")).toBeUndefined();
  });

  test("an account never sees, reads back or deletes another account's answers", async () => {
    const store = await make();
    await store.keep("acct_a", "resp_1", turn(1));
    expect(await store.item("acct_b", "msg_1_0")).toBeUndefined();
    expect(await store.response("acct_b", "resp_1")).toBeUndefined();
    expect(await store.body("acct_b", "resp_1")).toBeUndefined();
    expect(await store.delete("acct_b", "resp_1")).toBe(false);
    expect(await store.response("acct_a", "resp_1")).toEqual(readBack(turn(1)));
  });

  test("delete: the answer and its items are gone, a second delete finds nothing", async () => {
    const store = await make();
    await store.keep("acct_a", "resp_1", turn(1));
    expect(await store.delete("acct_a", "resp_1")).toBe(true);
    expect(await store.response("acct_a", "resp_1")).toBeUndefined();
    expect(await store.item("acct_a", "msg_1_0")).toBeUndefined();
    expect(await store.delete("acct_a", "resp_1")).toBe(false);
  });

  test("an account over its quota loses its own least recently used answers, never another account's", async () => {
    // Each answer about 10 kB (a reasoning item's encrypted_content in its input counts), quota 32 kB.
    const store = await make({ accountMaxBytes: 32 * KB, maxBytes: 1 << 20 });
    await store.keep("acct_a", "resp_a", turn(100, undefined, 10 * KB));
    for (let n = 0; n < 8; n++) expect(await store.keep("acct_b", `resp_${n}`, turn(n, undefined, 10 * KB))).toBe(true);
    expect(await store.response("acct_a", "resp_a")).toEqual(readBack(turn(100, undefined, 10 * KB)));
    const held: number[] = [];
    for (let n = 0; n < 8; n++) if (await store.response("acct_b", `resp_${n}`)) held.push(n);
    // Three of 10 kB fit 32 kB: the last three stay, the five before went (reasoning bytes counted).
    expect(held).toEqual([5, 6, 7]);
  });

  test("a read counts as a use: the answer read survives its account's next eviction", async () => {
    const store = await make({ accountMaxBytes: 32 * KB });
    for (let n = 0; n < 3; n++) await store.keep("acct_a", `resp_${n}`, turn(n, undefined, 10 * KB));
    expect(await store.item("acct_a", "msg_0_0")).toBeDefined();
    await store.keep("acct_a", "resp_3", turn(3, undefined, 10 * KB));
    expect(await store.response("acct_a", "resp_0")).toBeDefined();
    expect(await store.response("acct_a", "resp_1")).toBeUndefined();
  });

  test("an answer over the per-answer limit is not kept and evicts nothing", async () => {
    const store = await make({ answerMaxBytes: 8 * KB, accountMaxBytes: 64 * KB });
    expect(store.maxAnswerBytes).toBe(8 * KB);
    await store.keep("acct_a", "resp_1", turn(1));
    expect(await store.keep("acct_a", "resp_2", turn(2, undefined, 9 * KB))).toBe(false);
    expect(await store.response("acct_a", "resp_2")).toBeUndefined();
    expect(await store.response("acct_a", "resp_1")).toEqual(readBack(turn(1)));
  });

  test("past the total, the account holding the most gives way, even when another account is writing", async () => {
    // About 10.6 kB an answer; quota 48 kB (four), total 64 kB (six): C holds four, B writes three.
    const store = await make({ accountMaxBytes: 48 * KB, maxBytes: 64 * KB });
    for (let n = 10; n < 14; n++) await store.keep("acct_c", `resp_${n}`, turn(n, undefined, 10 * KB));
    for (let n = 0; n < 3; n++) expect(await store.keep("acct_b", `resp_${n}`, turn(n, undefined, 10 * KB))).toBe(true);
    for (let n = 0; n < 3; n++) expect(await store.response("acct_b", `resp_${n}`)).toBeDefined();
    expect(await store.response("acct_c", "resp_10")).toBeUndefined();
    for (let n = 11; n < 14; n++) expect(await store.response("acct_c", `resp_${n}`)).toBeDefined();
  });

  test("an account idle past the TTL counts nothing toward the total: the next writer does not give way for it", async () => {
    const c = clock(true);
    // Total 40 kB: X's three answers and Y's three would not fit together.
    const store = await make({ accountMaxBytes: 40 * KB, maxBytes: 40 * KB, ttlMs: 60_000 }, c);
    for (let n = 0; n < 3; n++) await store.keep("acct_x", `resp_${n}`, turn(n, undefined, 10 * KB));
    c.advance(120_000);
    for (let n = 10; n < 13; n++) expect(await store.keep("acct_y", `resp_${n}`, turn(n, undefined, 10 * KB))).toBe(true);
    for (let n = 10; n < 13; n++) expect(await store.response("acct_y", `resp_${n}`)).toBeDefined();
    expect(await store.response("acct_x", "resp_2")).toBeUndefined();
  });

  test("what is unused for the TTL is gone; what is used stays", async () => {
    const c = clock(true);
    const store = await make({ ttlMs: 3_600_000 }, c);
    await store.keep("acct_a", "resp_1", turn(1));
    await store.keep("acct_a", "resp_2", turn(2));
    c.advance(3_000_000);
    expect(await store.item("acct_a", "msg_2_0")).toBeDefined();
    c.advance(1_000_000);
    expect(await store.response("acct_a", "resp_1")).toBeUndefined();
    expect(await store.item("acct_a", "msg_1_0")).toBeUndefined();
    expect(await store.item("acct_a", "msg_2_0")).toBeDefined();
  });

  test("store_max_bytes 0: switched off, nothing kept", async () => {
    const store = open(clock().now, { maxBytes: 0 });
    expect(store.enabled).toBe(false);
    expect(await store.keep("acct_a", "resp_1", turn(1))).toBe(false);
    expect(await store.response("acct_a", "resp_1")).toBeUndefined();
  });
});

describe("Redis response store, Redis unreachable", () => {
  test("lookups and keeps fail with ResponseStoreUnavailableError, never a silent miss", async () => {
    const store = createRedisResponseStore(`redis://127.0.0.1:${closedPort()}`, { maxBytes: 1 << 20, accountMaxBytes: 1 << 20, answerMaxBytes: 1 << 20, ttlMs: 60_000, now: Date.now, connectTimeoutMs: 200 });
    opened.push(store);
    for (const attempt of [() => store.response("acct_a", "resp_1"), () => store.item("acct_a", "msg_1_0"), () => store.keep("acct_a", "resp_1", turn(1)), () => store.delete("acct_a", "resp_1")]) {
      expect(await attempt().catch((e) => e)).toBeInstanceOf(ResponseStoreUnavailableError);
    }
  });
});

describe("resolving what a request refers to", () => {
  const filled = async () => {
    const store = createMemoryResponseStore({ maxBytes: 1 << 20, accountMaxBytes: 1 << 20, answerMaxBytes: 1 << 20, ttlMs: 60_000, now: clock().now });
    await store.keep("acct_a", "resp_1", turn(1));
    await store.keep("acct_a", "resp_2", turn(2, "resp_1"));
    await store.keep("acct_a", "resp_3", turn(3, "resp_2"));
    return store;
  };
  const errorOf = async (p: Promise<unknown>) => {
    const err = await p.then(
      () => undefined,
      (e) => e as Error,
    );
    if (!err) throw new Error("expected a refusal");
    return err;
  };

  test("item_reference items are replaced by the items they name, in place; OpenAI's bare {id} form too", async () => {
    const resolved = await resolveStoredInput(
      { input: [{ role: "user", content: "q" }, { type: "item_reference", id: "msg_1_0" }, { id: "msg_2_0" }, { role: "user", content: "next" }] },
      "acct_a",
      await filled(),
    );
    expect(resolved.input).toEqual([{ role: "user", content: "q" }, message("msg_1_0", "answer 1"), message("msg_2_0", "answer 2"), { role: "user", content: "next" }]);
    expect(resolved.history).toEqual([]);
    // An item with more than an id is not a reference (it goes on to translation as it is).
    const notReference = { id: "msg_1_0", content: "x" };
    expect((await resolveStoredInput({ input: [notReference] }, "acct_a", await filled())).input).toEqual([notReference]);
  });

  test("references read each stored answer once, however many of its items they name; more than MAX_REFERENCES are refused", async () => {
    const store = await filled();
    const calls: string[] = [];
    const counting: ResponseStore = {
      ...store, enabled: store.enabled, maxAnswerBytes: store.maxAnswerBytes,
      item: (scope, id) => (calls.push(`item ${id}`), store.item(scope, id)),
      response: (scope, id) => (calls.push(`response ${id}`), store.response(scope, id)),
    };
    const refs = [...Array.from({ length: 500 }, () => ({ type: "item_reference", id: "msg_1_0" })), { id: "msg_2_0" }, { type: "item_reference", id: "msg_1_0" }];
    const resolved = await resolveStoredInput({ input: refs }, "acct_a", counting);
    expect(resolved.input).toHaveLength(502);
    expect(resolved.input[0]).toEqual(message("msg_1_0", "answer 1"));
    expect(resolved.input[500]).toEqual(message("msg_2_0", "answer 2"));
    // Copies: one changed does not change another.
    expect(resolved.input[0]).not.toBe(resolved.input[1]);
    expect(calls.sort()).toEqual(["response resp_1", "response resp_2"]);
    const tooMany = Array.from({ length: MAX_REFERENCES + 1 }, () => ({ type: "item_reference", id: "msg_1_0" }));
    const err = await errorOf(resolveStoredInput({ input: tooMany }, "acct_a", store));
    expect(err).toBeInstanceOf(ResponsesRequestError);
    expect(err.message).toContain(`at most ${MAX_REFERENCES}`);
  });

  test("references bring in at most maxReferencedBytes of stored items, an item named twice counted twice: past it, refused before anything is copied", async () => {
    const store = await filled();
    const one = Buffer.byteLength(JSON.stringify(message("msg_1_0", "answer 1")));
    const named = (n: number) => ({ input: Array.from({ length: n }, () => ({ type: "item_reference", id: "msg_1_0" })) });
    expect((await resolveStoredInput(named(10), "acct_a", store, 10 * one)).input).toHaveLength(10);
    const err = await errorOf(resolveStoredInput(named(11), "acct_a", store, 10 * one));
    expect(err).toBeInstanceOf(ResponsesRequestError);
    expect(err.message).toContain(`more than ${10 * one} bytes of stored items`);
    expect(err.message).toContain("store: false");
  });

  test("an unknown reference is refused naming the id and what to send instead", async () => {
    const err = await errorOf(resolveStoredInput({ input: [{ type: "item_reference", id: "msg_gone_0" }] }, "acct_a", await filled()));
    expect(err).toBeInstanceOf(ResponsesRequestError);
    expect(err.message).toContain('"msg_gone_0"');
    expect(err.message).toContain("Send the item itself");
    expect(err.message).toContain("store: false");
    expect(err.message).toContain("another gateway process");
    // Another account's item is as unknown as a missing one.
    expect((await errorOf(resolveStoredInput({ input: [{ type: "item_reference", id: "msg_1_0" }] }, "acct_b", await filled()))).message).toContain('"msg_1_0"');
  });

  test("with storage switched off, references are refused as unsupported", async () => {
    const err = await errorOf(resolveStoredInput({ input: [{ type: "item_reference", id: "msg_1_0" }] }, "acct_a", NO_RESPONSE_STORE));
    expect(err.message).toContain("configured to store no responses");
    expect(err.message).toContain("store: false");
    expect((await errorOf(resolveStoredInput({ input: "x", previous_response_id: "resp_1" }, "acct_a", NO_RESPONSE_STORE))).message).toContain("previous_response_id is not supported");
  });

  test("a bare reasoning item of the current turn gets its kept item's encrypted content; earlier turns', unknown ids, other accounts' and a failing store leave it as it came; at most MAX_RESTORED_ANSWERS answers are read", async () => {
    const store = createMemoryResponseStore({ maxBytes: 1 << 24, accountMaxBytes: 1 << 24, answerMaxBytes: 1 << 20, ttlMs: 60_000, now: clock().now });
    const thinking = (n: number) => ({ id: `rs_${n}_0`, type: "reasoning", summary: [], encrypted_content: `sealed-${n}` });
    for (let n = 1; n <= MAX_RESTORED_ANSWERS + 2; n++) await store.keep("acct_a", `resp_${n}`, { input: [{ role: "user", content: "q" }], response: { id: `resp_${n}`, output: [thinking(n), message(`msg_${n}_1`, "a")] } });
    const bare = (n: number) => ({ id: `rs_${n}_0`, type: "reasoning", summary: [] });
    const user = { role: "user", content: "q" };
    const output = { type: "function_call_output", call_id: "c", output: "x" };
    const input = [bare(1), user, bare(2), output, bare(3), { ...bare(4), encrypted_content: "theirs" }, bare(999)];
    const resolved = await resolveStoredInput({ input }, "acct_a", store);
    // Before the last user message (an earlier turn): as it came. After it: restored, the client's own content kept, an unknown id as it came.
    expect(resolved.input).toEqual([bare(1), user, thinking(2), output, thinking(3), { ...bare(4), encrypted_content: "theirs" }, bare(999)]);
    expect(input[2]).toEqual(bare(2));
    // Another account's: as it came.
    expect((await resolveStoredInput({ input }, "acct_b", store)).input).toEqual(input);
    // A store that fails: as it came, never a refusal, and not asked again.
    const calls: string[] = [];
    const failing: ResponseStore = { ...store, enabled: true, maxAnswerBytes: store.maxAnswerBytes, response: async (_scope, id) => { calls.push(id); throw new ResponseStoreUnavailableError("down"); } };
    expect((await resolveStoredInput({ input }, "acct_a", failing)).input).toEqual(input);
    expect(calls).toEqual(["resp_2"]);
    // Many answers named: at most MAX_RESTORED_ANSWERS are read.
    const read: string[] = [];
    const counting: ResponseStore = { ...store, enabled: true, maxAnswerBytes: store.maxAnswerBytes, response: (scope, id, max) => (read.push(id), store.response(scope, id, max)) };
    const many = Array.from({ length: MAX_RESTORED_ANSWERS + 2 }, (_, i) => bare(i + 1));
    const out = (await resolveStoredInput({ input: [user, ...many] }, "acct_a", counting)).input;
    expect(read).toHaveLength(MAX_RESTORED_ANSWERS);
    expect(out.at(MAX_RESTORED_ANSWERS)).toEqual(thinking(MAX_RESTORED_ANSWERS));
    expect(out.at(-1)).toEqual(bare(MAX_RESTORED_ANSWERS + 2));
    // Storage switched off: nothing looked up, nothing refused.
    expect((await resolveStoredInput({ input }, "acct_a", NO_RESPONSE_STORE)).input).toEqual(input);
  });

  test("previous_response_id: every earlier turn's input and output, oldest first, before this request's input", async () => {
    const resolved = await resolveStoredInput({ input: "question 4", previous_response_id: "resp_3" }, "acct_a", await filled());
    expect(resolved.history.map((i) => (i.role === "user" ? i.content : (i.content as { text: string }[])[0]!.text))).toEqual(["question 1", "answer 1", "question 2", "answer 2", "question 3", "answer 3"]);
    expect(resolved.input).toEqual([{ type: "message", role: "user", content: "question 4" }]);
    expect(resolved.previous).toBe("resp_3");
  });

  test("a chain with a link gone is refused, naming the id asked for and the missing one", async () => {
    const c = clock();
    const store = createMemoryResponseStore({ maxBytes: 1 << 20, accountMaxBytes: 1 << 20, answerMaxBytes: 1 << 20, ttlMs: 1_000, now: c.now });
    await store.keep("acct_a", "resp_1", turn(1));
    c.advance(900);
    await store.keep("acct_a", "resp_2", turn(2, "resp_1"));
    c.advance(200);
    const err = await errorOf(resolveStoredInput({ input: "q", previous_response_id: "resp_2" }, "acct_a", store));
    expect(err.message).toContain('previous_response_id "resp_2"');
    expect(err.message).toContain('"resp_1"');
    expect(err.message).toContain("Send the whole conversation in `input`");
    expect((await errorOf(resolveStoredInput({ input: "q", previous_response_id: "resp_nope" }, "acct_a", store))).message).toContain('previous_response_id "resp_nope" names no response');
  });
});

describe("how an answer is kept as text (formats/openai-responses/response-store.ts)", () => {
  const answer: StoredResponse = {
    previous: "resp_0",
    input: [{ type: "message", role: "user", content: "question" }],
    response: { id: "resp_1", object: "response", output: [message("msg_1_0", "answer with \"output\": [ in it")], tools: [{ type: "function", name: "f", parameters: { type: "object", properties: { n: { enum: [1, 2, 3] } } } }], usage: { input_tokens: 3 } },
  };

  test("the Response text is exactly what was returned; read back, its items come from their own span, the rest unread", () => {
    const { input, response } = storedTexts(answer);
    expect(response).toBe(JSON.stringify(answer.response));
    expect(storedAnswer(input, response)).toEqual({ previous: "resp_0", input: answer.input, response: { output: answer.response.output } });
    // A text whose head no parser could read still gives its items: the head is never parsed.
    const unreadableHead = "X" + response.slice(1);
    expect(storedAnswer(input, unreadableHead).response.output).toEqual(answer.response.output);
  });

  test("an answer kept before the items' span was recorded (a shared store across an upgrade) is read whole", () => {
    const input = JSON.stringify({ previous: "resp_0", input: answer.input });
    expect(storedAnswer(input, JSON.stringify(answer.response))).toEqual({ previous: "resp_0", input: answer.input, response: { output: answer.response.output } });
  });
});
