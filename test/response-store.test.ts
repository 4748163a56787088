/**
 * The Responses API's stored answers: the in-memory store (bounds, TTL, accounts kept apart,
 * copies) and the resolution of `item_reference` and `previous_response_id` against it.
 */
import { describe, expect, test } from "bun:test";
import { createMemoryResponseStore } from "../src/store/memory/memory-response-store.ts";
import { NO_RESPONSE_STORE, type StoredResponse } from "../src/formats/openai-responses/response-store.ts";
import { resolveStoredInput } from "../src/formats/openai-responses/stored-input.ts";
import { ResponsesRequestError } from "../src/formats/openai-responses/responses-to-chat.ts";

function clock() {
  let now = 1_700_000_000_000;
  return { now: () => now, advance: (ms: number) => void (now += ms) };
}

const message = (id: string, text: string) => ({ id, type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text, annotations: [] }] });
const turn = (n: number, previous?: string): StoredResponse => ({
  ...(previous ? { previous } : {}),
  input: [{ type: "message", role: "user", content: `question ${n}` }],
  output: [message(`msg_${n}_0`, `answer ${n}`)],
});

describe("in-memory response store", () => {
  test("keeps an answer under its id and each output item under its own, as copies", () => {
    const store = createMemoryResponseStore({ maxBytes: 1 << 20, ttlMs: 60_000, now: clock().now });
    store.keep("acct_a", "resp_1", turn(1));
    expect(store.response("acct_a", "resp_1")).toEqual(turn(1));
    const item = store.item("acct_a", "msg_1_0")!;
    expect(item).toEqual(message("msg_1_0", "answer 1"));
    // A reader changing what it got changes nothing stored.
    (item.content as { text: string }[])[0]!.text = "tampered";
    expect(store.item("acct_a", "msg_1_0")).toEqual(message("msg_1_0", "answer 1"));
  });

  test("an account never sees another account's answers", () => {
    const store = createMemoryResponseStore({ maxBytes: 1 << 20, ttlMs: 60_000, now: clock().now });
    store.keep("acct_a", "resp_1", turn(1));
    expect(store.item("acct_b", "msg_1_0")).toBeUndefined();
    expect(store.response("acct_b", "resp_1")).toBeUndefined();
  });

  test("bounded by bytes: many answers later, the first ones are gone and the latest are there", () => {
    const store = createMemoryResponseStore({ maxBytes: 8_192, ttlMs: 60_000, now: clock().now });
    const big = (n: number): StoredResponse => ({ input: [{ type: "message", role: "user", content: "x".repeat(1_000) }], output: [message(`msg_${n}_0`, `answer ${n}`)] });
    for (let n = 0; n < 50; n++) store.keep("acct_a", `resp_${n}`, big(n));
    expect(store.response("acct_a", "resp_0")).toBeUndefined();
    expect(store.item("acct_a", "msg_0_0")).toBeUndefined();
    expect(store.response("acct_a", "resp_49")).toEqual(big(49));
    expect(store.item("acct_a", "msg_49_0")).toBeDefined();
    // About 1.2 kB per answer and item pair: what 8 kB holds, not more.
    let kept = 0;
    for (let n = 0; n < 50; n++) if (store.response("acct_a", `resp_${n}`)) kept++;
    expect(kept).toBeGreaterThanOrEqual(4);
    expect(kept).toBeLessThanOrEqual(7);
  });

  test("an answer larger than a quarter of the bound is not kept, and evicts nothing", () => {
    const store = createMemoryResponseStore({ maxBytes: 8_192, ttlMs: 60_000, now: clock().now });
    store.keep("acct_a", "resp_small", turn(1));
    store.keep("acct_a", "resp_huge", { input: [{ type: "message", role: "user", content: "x".repeat(3_000) }], output: [] });
    expect(store.response("acct_a", "resp_huge")).toBeUndefined();
    expect(store.response("acct_a", "resp_small")).toEqual(turn(1));
  });

  test("what is unused for the TTL is gone; what is used stays", () => {
    const c = clock();
    const store = createMemoryResponseStore({ maxBytes: 1 << 20, ttlMs: 3_600_000, now: c.now });
    store.keep("acct_a", "resp_1", turn(1));
    store.keep("acct_a", "resp_2", turn(2));
    c.advance(3_000_000);
    expect(store.item("acct_a", "msg_2_0")).toBeDefined();
    c.advance(1_000_000);
    expect(store.response("acct_a", "resp_1")).toBeUndefined();
    expect(store.item("acct_a", "msg_1_0")).toBeUndefined();
    expect(store.item("acct_a", "msg_2_0")).toBeDefined();
  });

  test("store_max_bytes 0: switched off, nothing kept", () => {
    const store = createMemoryResponseStore({ maxBytes: 0, ttlMs: 60_000, now: clock().now });
    expect(store.enabled).toBe(false);
    store.keep("acct_a", "resp_1", turn(1));
    expect(store.response("acct_a", "resp_1")).toBeUndefined();
  });
});

describe("resolving what a request refers to", () => {
  const filled = () => {
    const store = createMemoryResponseStore({ maxBytes: 1 << 20, ttlMs: 60_000, now: clock().now });
    store.keep("acct_a", "resp_1", turn(1));
    store.keep("acct_a", "resp_2", turn(2, "resp_1"));
    store.keep("acct_a", "resp_3", turn(3, "resp_2"));
    return store;
  };
  const errorOf = (fn: () => unknown) => {
    try {
      fn();
    } catch (err) {
      return err as Error;
    }
    throw new Error("expected a refusal");
  };

  test("item_reference items are replaced by the items they name, in place; OpenAI's bare {id} form too", () => {
    const resolved = resolveStoredInput(
      { input: [{ role: "user", content: "q" }, { type: "item_reference", id: "msg_1_0" }, { id: "msg_2_0" }, { role: "user", content: "next" }] },
      "acct_a",
      filled(),
    );
    expect(resolved.input).toEqual([{ role: "user", content: "q" }, message("msg_1_0", "answer 1"), message("msg_2_0", "answer 2"), { role: "user", content: "next" }]);
    expect(resolved.history).toEqual([]);
    // An item with more than an id is not a reference (it goes on to translation as it is).
    const notReference = { id: "msg_1_0", content: "x" };
    expect(resolveStoredInput({ input: [notReference] }, "acct_a", filled()).input).toEqual([notReference]);
  });

  test("an unknown reference is refused naming the id and what to send instead", () => {
    const err = errorOf(() => resolveStoredInput({ input: [{ type: "item_reference", id: "msg_gone_0" }] }, "acct_a", filled()));
    expect(err).toBeInstanceOf(ResponsesRequestError);
    expect(err.message).toContain('"msg_gone_0"');
    expect(err.message).toContain("Send the item itself");
    expect(err.message).toContain("store: false");
    expect(err.message).toContain("another gateway process");
    // Another account's item is as unknown as a missing one.
    expect(errorOf(() => resolveStoredInput({ input: [{ type: "item_reference", id: "msg_1_0" }] }, "acct_b", filled())).message).toContain('"msg_1_0"');
  });

  test("with storage switched off, references are refused as unsupported", () => {
    const err = errorOf(() => resolveStoredInput({ input: [{ type: "item_reference", id: "msg_1_0" }] }, "acct_a", NO_RESPONSE_STORE));
    expect(err.message).toContain("configured to store no responses");
    expect(err.message).toContain("store: false");
    expect(errorOf(() => resolveStoredInput({ input: "x", previous_response_id: "resp_1" }, "acct_a", NO_RESPONSE_STORE)).message).toContain("previous_response_id is not supported");
  });

  test("previous_response_id: every earlier turn's input and output, oldest first, before this request's input", () => {
    const resolved = resolveStoredInput({ input: "question 4", previous_response_id: "resp_3" }, "acct_a", filled());
    expect(resolved.history.map((i) => (i.role === "user" ? i.content : (i.content as { text: string }[])[0]!.text))).toEqual(["question 1", "answer 1", "question 2", "answer 2", "question 3", "answer 3"]);
    expect(resolved.input).toEqual([{ type: "message", role: "user", content: "question 4" }]);
    expect(resolved.previous).toBe("resp_3");
  });

  test("a chain with a link gone is refused, naming the id asked for and the missing one", () => {
    const c = clock();
    const store = createMemoryResponseStore({ maxBytes: 1 << 20, ttlMs: 1_000, now: c.now });
    store.keep("acct_a", "resp_1", turn(1));
    c.advance(900);
    store.keep("acct_a", "resp_2", turn(2, "resp_1"));
    c.advance(200);
    const err = errorOf(() => resolveStoredInput({ input: "q", previous_response_id: "resp_2" }, "acct_a", store));
    expect(err.message).toContain('previous_response_id "resp_2"');
    expect(err.message).toContain('"resp_1"');
    expect(err.message).toContain("Send the whole conversation in `input`");
    expect(errorOf(() => resolveStoredInput({ input: "q", previous_response_id: "resp_nope" }, "acct_a", store)).message).toContain('previous_response_id "resp_nope" names no response');
  });
});
