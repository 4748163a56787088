/**
 * Issue 32, item 1, over HTTP on loopback: stored Responses answers are bounded per account (one
 * account's flood never evicts another's answers, and every byte of it counts, reasoning
 * `encrypted_content` included), an answer past the per-answer limit is a 400, the SDK's
 * `responses.retrieve` and `responses.delete` work on the key's own answers only, and a store
 * that cannot be reached is answered as the README says (503 for what needs it, `store: false`).
 * Across workers and gateways (Redis): test/process/stored-responses-scale-out.test.ts.
 */
import { describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { FREE_MODEL, OPENAI_MODEL, post, useGateway, type Gateway } from "../helpers/gateway.ts";
import { createRedisResponseStore } from "../../src/store/redis/redis-response-store.ts";
import { closedPort } from "../helpers/backends.ts";

const upstream = useFakeUpstream();

/** A second account on the same gateway, with a key of its own. */
async function otherAccount(gw: Gateway, name: string) {
  const account = await gw.app.services.accounts.createAccount(name, 1_000_000_000);
  const key = (await gw.app.services.accounts.createKey(account.id, name))!;
  return { accountId: account.id, key: key.key };
}
const sdk = (gw: Gateway, key = gw.key) => new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
const get = (gw: Gateway, key: string, id: string, method = "GET") => fetch(`${gw.url}/v1/responses/${id}`, { method, headers: { authorization: `Bearer ${key}` } });
/** What the upstream was last sent, as text: a follow-up's history reaches it there. */
const lastUpstreamText = () => upstream.requests.at(-1)!.rawBody;

describe("quotas per account (default bounds: 32 MiB an account, 16 MiB an answer)", () => {
  const gw = useGateway(() => ({ upstreamUrl: upstream.url }));

  test("account B's 8 answers of 9.5 MB (a reasoning item each) evict only B's own; A's previous_response_id still works", async () => {
    const a = sdk(gw);
    const remembered = await a.responses.create({ model: FREE_MODEL, input: "Remember the number 4711." });
    const b = await otherAccount(gw, "flooder");
    const flood: string[] = [];
    for (let n = 0; n < 8; n++) {
      const res = await post(gw, "/v1/responses", {
        model: FREE_MODEL,
        input: [
          { type: "reasoning", id: `rs_flood_${n}`, summary: [], encrypted_content: String(n).repeat(9_500_000) },
          { role: "user", content: `flood ${n}` },
        ],
      }, { authorization: `Bearer ${b.key}` });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { id: string; store: boolean };
      expect(body.store).toBe(true);
      flood.push(body.id);
    }
    // A's answer survived B's 76 MB: its follow-up carries the earlier turn to the upstream.
    const followUp = await a.responses.create({ model: FREE_MODEL, input: "Which number?", previous_response_id: remembered.id });
    expect(followUp.status).toBe("completed");
    expect(lastUpstreamText()).toContain("Remember the number 4711.");
    // B's reasoning bytes were counted: three answers of 9.5 MB fit 32 MiB, the five before went.
    const held: number[] = [];
    for (let n = 0; n < 8; n++) if ((await get(gw, b.key, flood[n]!)).status === 200) held.push(n);
    expect(held).toEqual([5, 6, 7]);
    const gone = await post(gw, "/v1/responses", { model: FREE_MODEL, input: "x", previous_response_id: flood[0] }, { authorization: `Bearer ${b.key}` });
    expect(gone.status).toBe(400);
    expect(((await gone.json()) as { error: { message: string } }).error.message).toContain("names no response");
  }, 60_000);
});

describe("the per-answer limit (answer_max_bytes: 64 KiB)", () => {
  const gw = useGateway(() => ({ upstreamUrl: upstream.url, responses: { answer_max_bytes: 64 * 1024 } }));

  test("an input past the limit is a 400 invalid_request_error before anything is sent; with store: false it is answered", async () => {
    const before = upstream.requests.length;
    const input = [{ type: "reasoning", id: "rs_big_0", summary: [], encrypted_content: "z".repeat(100_000) }, { role: "user", content: "hi" }];
    const res = await post(gw, "/v1/responses", { model: FREE_MODEL, input });
    expect(res.status).toBe(400);
    const { error } = (await res.json()) as { error: { message: string; type: string } };
    expect(error.type).toBe("invalid_request_error");
    expect(error.message).toContain("65536 bytes");
    expect(error.message).toContain("store: false");
    expect(upstream.requests.length).toBe(before);
    const unstored = await post(gw, "/v1/responses", { model: FREE_MODEL, input, store: false });
    expect(unstored.status).toBe(200);
    expect(((await unstored.json()) as { store: boolean }).store).toBe(false);
  });

  test("an answer whose output takes it past the limit is delivered saying store: false, and is not kept", async () => {
    // About 40 kB in, and the echo about 40 kB out: under the limit alone, over it together.
    const answer = await sdk(gw).responses.create({ model: OPENAI_MODEL, input: "w".repeat(40_000) });
    expect(answer.output_text).toContain("w".repeat(1_000));
    expect((answer as unknown as { store: boolean }).store).toBe(false);
    expect((await get(gw, gw.key, answer.id)).status).toBe(404);
  });
});

describe("GET and DELETE /v1/responses/{id}", () => {
  const gw = useGateway(() => ({ upstreamUrl: upstream.url }));

  test("the SDK's retrieve returns the answer as it was returned, whole or streamed; delete removes it", async () => {
    const client = sdk(gw);
    const whole = await client.responses.create({ model: OPENAI_MODEL, input: "Hello SDK" });
    expect(await client.responses.retrieve(whole.id)).toEqual(whole);
    const streamed = await client.responses.stream({ model: OPENAI_MODEL, input: "Hello stream" }).finalResponse();
    const retrieved = await client.responses.retrieve(streamed.id);
    expect(retrieved.output_text).toBe("Echo: Hello stream");
    expect(retrieved.id).toBe(streamed.id);
    expect(retrieved.usage).toEqual(streamed.usage!);

    // Asked as a stream (a background response's events, in OpenAI's API): a 400 that says why, not JSON the SDK would read as no events.
    const asStream = await client.responses.retrieve(whole.id, { stream: true }).catch((e) => e);
    expect(asStream).toBeInstanceOf(OpenAI.BadRequestError);
    expect(asStream.message).toContain("background");
    expect(asStream.param).toBe("stream");
    expect(await client.responses.retrieve(whole.id, { stream: false })).toEqual(whole);

    await client.responses.delete(whole.id);
    expect(await client.responses.retrieve(whole.id).catch((e) => e)).toBeInstanceOf(OpenAI.NotFoundError);
    const again = await client.responses.delete(whole.id).catch((e) => e);
    expect(again).toBeInstanceOf(OpenAI.NotFoundError);
    // A deleted answer can no longer be continued.
    expect(await client.responses.create({ model: OPENAI_MODEL, input: "x", previous_response_id: whole.id }).catch((e) => e)).toBeInstanceOf(OpenAI.BadRequestError);
  });

  test("DELETE answers as OpenAI does: {id, object: response.deleted, deleted: true}", async () => {
    const answer = await sdk(gw).responses.create({ model: OPENAI_MODEL, input: "to delete" });
    const res = await get(gw, gw.key, answer.id, "DELETE");
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ id: answer.id, object: "response.deleted", deleted: true });
  });

  test("another account's id is the same 404 as an unknown one, for GET and DELETE, and its answer stays", async () => {
    const answer = await sdk(gw).responses.create({ model: OPENAI_MODEL, input: "mine" });
    const other = await otherAccount(gw, "other");
    const unknown = `resp_${"0".repeat(32)}`;
    for (const method of ["GET", "DELETE"]) {
      const theirs = await get(gw, other.key, answer.id, method);
      const nobody = await get(gw, other.key, unknown, method);
      expect(theirs.status).toBe(404);
      expect(nobody.status).toBe(404);
      const theirsBody = (await theirs.json()) as { error: { message: string; type: string } };
      const nobodyBody = (await nobody.json()) as { error: { message: string; type: string } };
      expect(theirsBody).toEqual(JSON.parse(JSON.stringify(nobodyBody).replaceAll(unknown, answer.id)));
    }
    expect((await get(gw, gw.key, answer.id)).status).toBe(200);
    // Continuing another account's answer is refused like an unknown id too.
    const continued = await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "x", previous_response_id: answer.id }, { authorization: `Bearer ${other.key}` });
    expect(continued.status).toBe(400);
  });

  test("GET and DELETE need a key", async () => {
    expect((await fetch(`${gw.url}/v1/responses/resp_x`)).status).toBe(401);
    expect((await fetch(`${gw.url}/v1/responses/resp_x`, { method: "DELETE" })).status).toBe(401);
  });
});

describe("the shared store (Redis) unreachable", () => {
  const store = createRedisResponseStore(`redis://127.0.0.1:${closedPort()}`, { maxBytes: 1 << 24, accountMaxBytes: 1 << 22, answerMaxBytes: 1 << 21, ttlMs: 3_600_000, now: Date.now, connectTimeoutMs: 200 });
  const gw = useGateway(() => ({ upstreamUrl: upstream.url, responseStore: store }));

  test("answers still go out, saying store: false; previous_response_id, item_reference, GET and DELETE are a 503 that says what to do", async () => {
    const client = sdk(gw);
    const answer = await client.responses.create({ model: OPENAI_MODEL, input: "Hello SDK" });
    expect(answer.output_text).toBe("Echo: Hello SDK");
    expect((answer as unknown as { store: boolean }).store).toBe(false);
    const before = upstream.requests.length;
    for (const body of [
      { model: OPENAI_MODEL, input: "x", previous_response_id: answer.id },
      { model: OPENAI_MODEL, input: [{ type: "item_reference", id: `msg_${answer.id.slice(5)}_0` }] },
    ]) {
      const res = await post(gw, "/v1/responses", body);
      expect(res.status).toBe(503);
      expect(res.headers.get("retry-after")).toBe("5");
      const { error } = (await res.json()) as { error: { message: string } };
      expect(error.message).toContain("Stored responses cannot be reached right now");
      expect(error.message).toContain("store: false");
      expect(error.message).not.toContain("127.0.0.1");
    }
    expect(upstream.requests.length).toBe(before);
    for (const method of ["GET", "DELETE"]) expect((await get(gw, gw.key, answer.id, method)).status).toBe(503);
    store.close();
  });
});

describe("references bring in at most a body's worth of stored items", () => {
  const gw = useGateway(() => ({ upstreamUrl: upstream.url, limits: { max_body_bytes: 1_000_000 } }));

  test("one stored answer named more times than limits.max_body_bytes holds is a 400, before anything is copied or sent", async () => {
    // A 20 KB answer: 49 references to it bring ~1 MB, past this gateway's 1,000,000-byte bodies.
    upstream.reply({ kind: "json", body: { id: "chatcmpl-x", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "long answer ".repeat(1_700) }, finish_reason: "stop" }], usage: { prompt_tokens: 5, completion_tokens: 5000, total_tokens: 5005 } } });
    const answer = await sdk(gw).responses.create({ model: OPENAI_MODEL, input: "Say a lot." });
    const item = { type: "item_reference", id: answer.output[0]!.id };
    const sent = upstream.requests.length;
    const ok = await post(gw, "/v1/responses", { model: OPENAI_MODEL, store: false, input: [...Array.from({ length: 10 }, () => item), { role: "user", content: "and?" }] });
    expect(ok.status).toBe(200);
    await ok.arrayBuffer();
    const refused = await post(gw, "/v1/responses", { model: OPENAI_MODEL, store: false, input: Array.from({ length: 60 }, () => item) });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as any).error.message).toContain("more than 1000000 bytes of stored items");
    expect(upstream.requests.length).toBe(sent + 1);
    expect(upstream.requests.at(-1)!.rawBody.split("long answer long answer").length).toBeGreaterThan(10);
  });
});

describe("a stored response's input items (the SDK's responses.inputItems.list)", () => {
  const upstream = useFakeUpstream();
  const gw = useGateway(() => ({ upstreamUrl: upstream.url }));

  test("listed as OpenAI lists them: ids, messages with content parts, newest first by default, in pages; another account's is a 404", async () => {
    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
    const first = await openai.responses.create({ model: OPENAI_MODEL, input: "first question" });
    const second = await openai.responses.create({
      model: OPENAI_MODEL,
      previous_response_id: first.id,
      input: [
        { role: "user", content: "second question" },
        { role: "user", content: [{ type: "input_text", text: "with parts" }] },
        { type: "function_call", call_id: "call_1", name: "lookup", arguments: "{}" },
        { type: "function_call_output", call_id: "call_1", output: "42" },
      ] as never,
    });
    const page = await openai.responses.inputItems.list(second.id);
    const items = page.data as Record<string, any>[];
    // Its own request's items only (the chain's earlier turns are the earlier answer's), newest first.
    expect(items.map((i) => i.type)).toEqual(["function_call_output", "function_call", "message", "message"]);
    expect(items[3]).toMatchObject({ type: "message", role: "user", content: [{ type: "input_text", text: "second question" }], status: "completed" });
    expect(items[2]!.content).toEqual([{ type: "input_text", text: "with parts" }]);
    for (const item of items) expect(typeof item.id).toBe("string");
    expect(new Set(items.map((i) => i.id)).size).toBe(4);
    // Oldest first, in pages after a cursor.
    const asc = await openai.responses.inputItems.list(second.id, { order: "asc", limit: 1 });
    expect(asc.data.map((i: any) => i.id)).toEqual([items[3]!.id]);
    expect(asc.has_more).toBe(true);
    const next = await openai.responses.inputItems.list(second.id, { order: "asc", limit: 3, after: items[3]!.id });
    expect(next.data.map((i: any) => i.id)).toEqual([items[2]!.id, items[1]!.id, items[0]!.id]);
    expect(next.has_more).toBe(false);
    // A cursor that names no item: an empty last page (has_more false, so no client pages on).
    const stray = await openai.responses.inputItems.list(second.id, { after: "msg_not_an_item" });
    expect([stray.data, stray.has_more]).toEqual([[], false]);
    // The first answer's own input: the plain string it was asked.
    expect(((await openai.responses.inputItems.list(first.id)).data as any[]).map((i) => i.content)).toEqual([[{ type: "input_text", text: "first question" }]]);
    const unknown = await openai.responses.inputItems.list("resp_nope").catch((e) => e);
    expect(unknown).toBeInstanceOf(OpenAI.NotFoundError);
  });
});
