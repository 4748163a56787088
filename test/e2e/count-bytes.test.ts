/**
 * Free counts' bytes a minute per account (limits/count-bytes.ts), on loopback. A count forwarded
 * to an Anthropic upstream never waits in the count queue, so before this limit nothing bounded
 * what such counts cost the request thread. One tenant's ten keys sent 3.8 MB counts, about 80 a
 * second, all free, and another tenant's p50 went from 1.3 ms to 273 ms (a hostile-tenant probe,
 * twelfth). Past its account's bytes, a count is refused with 429 and the wait, before its body
 * is read. Another account's counts, and the same account's answers, are not held back.
 */
import { beforeAll, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, post, useGateway } from "../helpers/gateway.ts";

/** A bucket of 2 MiB a minute, bodies of at most 1 MiB: five counts of ~400 KB, then a wait. */
const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, limits: { max_body_bytes: 1_048_576, count_tokens_account_bytes_per_minute: 2_097_152 } }));
const flooder = { key: "", other: "" };
beforeAll(async () => {
  const account = await gw.app.services.accounts.createAccount("flooder", 1_000_000_000);
  flooder.key = (await gw.app.services.accounts.createKey(account.id, "flood"))!.key;
  flooder.other = (await gw.app.services.accounts.createKey(account.id, "flood-2"))!.key;
});

const TEXT = "word ".repeat(80_000);
const count = (key: string, body: string | ReadableStream = JSON.stringify({ model: ANTHROPIC_MODEL, messages: [{ role: "user", content: TEXT }] })) =>
  fetch(`${gw.url}/v1/messages/count_tokens`, { method: "POST", headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" }, body });

test("an account's counts past its bytes a minute are refused with 429 and the wait, whichever of its keys sends them; another account's are not", async () => {
  const asked = () => upstream.requests.filter((r) => r.path === "/v1/messages/count_tokens").length;
  const before = asked();
  const statuses: number[] = [];
  for (let i = 0; i < 5; i++) {
    const res = await count(i % 2 === 0 ? flooder.key : flooder.other);
    await res.arrayBuffer();
    statuses.push(res.status);
  }
  expect(statuses).toEqual([200, 200, 200, 200, 200]);
  // The account's other key shares the bucket: more keys buy no more counting.
  const refused = await count(flooder.other);
  expect(refused.status).toBe(429);
  const wait = Number(refused.headers.get("retry-after"));
  expect(wait).toBeGreaterThanOrEqual(1);
  expect(wait).toBeLessThanOrEqual(60);
  const { error } = (await refused.json()) as { type: string; error: { type: string; message: string } };
  expect(error.type).toBe("rate_limit_error");
  expect(error.message).toContain("this account");
  // Refused before its body was read: the upstream was asked five times, not six.
  expect(asked() - before).toBe(5);

  // Another tenant counts as before.
  const other = await count(gw.key);
  expect(other.status).toBe(200);
  expect(((await other.json()) as { input_tokens: number }).input_tokens).toBeGreaterThan(0);
  // The flooding account's answers are not held back by its counts.
  const answer = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 20, messages: [{ role: "user", content: "hi" }] }, { authorization: `Bearer ${flooder.key}` });
  expect(answer.status).toBe(200);
});

test("a count that declares no length (a chunked body) weighs the largest body, so it cannot pass for nothing", async () => {
  const account = await gw.app.services.accounts.createAccount("chunked", 1_000_000_000);
  const key = (await gw.app.services.accounts.createKey(account.id, "chunked"))!.key;
  const chunked = () => {
    const bytes = new TextEncoder().encode(JSON.stringify({ model: ANTHROPIC_MODEL, messages: [{ role: "user", content: "hello" }] }));
    return new ReadableStream({ start(c) { c.enqueue(bytes); c.close(); } });
  };
  // Two largest bodies fill 2 MiB; the third waits.
  expect((await count(key, chunked())).status).toBe(200);
  expect((await count(key, chunked())).status).toBe(200);
  const third = await count(key, chunked());
  expect(third.status).toBe(429);
  await third.arrayBuffer();
  // A sized count waits too: the bucket is empty, not only for largest bodies. (100 KB: the
  // bucket refills ~35 KB a second, so a few bytes would have come back by the time it is asked.)
  const sized = await count(key, JSON.stringify({ model: ANTHROPIC_MODEL, messages: [{ role: "user", content: "word ".repeat(20_000) }] }));
  expect(sized.status).toBe(429);
  await sized.arrayBuffer();
});

test("a count its key's rate refuses spends none of its account's bytes: the account's other key still counts", async () => {
  // A key allowed 1 request a minute has 10 counts a minute (COUNT_TOKENS_RATE_FACTOR). Its
  // bytes were taken before its rate was asked, so the counts the rate refused drained the
  // account's bucket too, and the account's other key, within its own rate, was refused for bytes.
  const account = await gw.app.services.accounts.createAccount("noisy-key", 1_000_000_000);
  const noisy = (await gw.app.services.accounts.createKey(account.id, { name: "noisy", rateLimitPerMinute: 1 }))!.key;
  const quiet = (await gw.app.services.accounts.createKey(account.id, "quiet"))!.key;
  const sized = (words: number) => JSON.stringify({ model: ANTHROPIC_MODEL, messages: [{ role: "user", content: "word ".repeat(words) }] });
  // ~150 KB each: ten pass (1.5 MB of the 2 MiB), ten more are past the key's rate.
  const statuses: number[] = [];
  for (let i = 0; i < 20; i++) {
    const res = await count(noisy, sized(30_000));
    statuses.push(res.status);
    const body = (await res.json()) as { error?: { message: string } };
    if (res.status === 429) expect(body.error!.message).toContain("requests per minute for this key");
  }
  expect(statuses).toEqual([...Array(10).fill(200), ...Array(10).fill(429)]);
  // ~400 KB from the other key: the ~550 KB the account has left take it.
  const res = await count(quiet, sized(80_000));
  expect(res.status).toBe(200);
  await res.arrayBuffer();
});
