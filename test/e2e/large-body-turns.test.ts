/**
 * Large bodies take turns to be parsed, round-robin across accounts (limits/parse-turns.ts). A
 * hostile-tenant probe (nineteenth session) sent 3.9 MB embeddings batches from ten keys of one
 * account: each body was parsed and prepared on the request thread in the order it arrived, and
 * another tenant's request waited behind all of them (its p99 from 4 ms to 674 ms). Here one
 * account's six large bodies and then another account's one arrive together; the other account's
 * reaches the vendor second, not last. Bodies are in memory (app.handle), so all have arrived
 * before the first is parsed, whatever the machine's speed.
 */
import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, useGateway } from "../helpers/gateway.ts";
import { until } from "../helpers/until.ts";

const upstream = useFakeUpstream();
const EMBED = "test/embed";
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  // A turn the test holds is not ended for it at 250 ms.
  parseTurnMaxHoldMs: 60_000,
  extraModels: [{ id: EMBED, provider: "fake-openai", upstream_model: "text-embedding-3-small", category: "embedding", context_length: 8192, pricing: { input_per_mtok: 20, output_per_mtok: 0 } }],
}));

/**
 * An embeddings batch of about 300 KB (past the 256 KiB of a large body), its first input `who`.
 * Embeddings, not chat: a chat prompt this size is counted against its window, in turns of its own
 * across accounts, which would order the requests whatever the body plugin does.
 */
function largeBody(who: string): string {
  return JSON.stringify({ model: EMBED, dimensions: 8, input: [who, ...Array.from({ length: 20 }, (_, i) => `${"lorem ipsum ".repeat(1250)}${i}`)] });
}

function ask(key: string, body: string, path = "/v1/embeddings"): Promise<Response> {
  return gw.app.handle(new Request(`http://gateway${path}`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body }));
}

describe("large bodies take turns across accounts", () => {
  test("another account's large body is sent upstream second, not after one account's whole backlog", async () => {
    const other = await gw.app.services.accounts.createAccount("other", 1000 * 1e6);
    const otherKey = (await gw.app.services.accounts.createKey(other.id, "other"))!.key;
    upstream.reset();
    const answers = [...Array.from({ length: 6 }, (_, i) => ask(gw.key, largeBody(`A${i}`))), ask(otherKey, largeBody("B0"))];
    const statuses = await Promise.all(answers.map(async (r) => (await r).status));
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 200]);
    const order = upstream.requests.filter((r) => r.path === "/v1/embeddings").map((r) => String(r.body.input[0]));
    expect(order.length).toBe(7);
    // Its turn came second (what is sent after a turn is not ordered: a later body can overtake).
    expect(order.indexOf("B0")).toBeLessThanOrEqual(2);
  });

  test("small bodies take no turn: one sent behind a large backlog is answered", async () => {
    upstream.reset();
    const large = Array.from({ length: 4 }, (_, i) => ask(gw.key, largeBody(`A${i}`)));
    const small = await ask(gw.key, JSON.stringify({ model: OPENAI_MODEL, max_tokens: 5, messages: [{ role: "user", content: "hi" }] }), "/v1/chat/completions");
    expect(small.status).toBe(200);
    expect((await Promise.all(large)).map((r) => r.status)).toEqual([200, 200, 200, 200]);
  });

  test("a large body whose client left while it waited for its turn is not parsed when the turn comes (refused 499, not judged)", async () => {
    const endTurn = await gw.app.services.parseTurns.take("other-key", "other-account");
    const leaving = new AbortController();
    // Not JSON at all: parsed, it would be refused 400.
    const answer = gw.app.handle(new Request("http://gateway/v1/embeddings", { method: "POST", headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" }, body: "x".repeat(300_000), signal: leaving.signal }));
    await until("the body waits for a turn", 10_000, () => gw.app.services.parseTurns.size === 2);
    leaving.abort();
    endTurn();
    expect((await answer).status).toBe(499);
    expect(gw.app.services.parseTurns.size).toBe(0);
  });
});
