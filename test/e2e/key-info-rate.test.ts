/**
 * GET /v1/key has a bucket of its own: answered whatever the chat bucket holds (a client learns
 * when to come back), spending none of it, and bounded at ten times the key's chat rate (a
 * hostile-tenant probe, thirty-fourth session: 51,279 unlimited calls in 9 s, two store reads
 * each, slowed every tenant's paid requests more than a flood the chat bucket refuses).
 */
import { expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, post, useGateway } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, requestsPerMinute: 3 }));
const keyInfo = () => fetch(`${gw.url}/v1/key`, { headers: { authorization: `Bearer ${gw.key}` } });
const chat = () => post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] });

test("GET /v1/key spends nothing of the chat bucket, is answered when it is empty, and has ten times its rate", async () => {
  // Ten questions (of thirty: ten times 3 a minute) leave the chat bucket whole.
  for (let i = 0; i < 10; i++) expect([i, (await keyInfo()).status]).toEqual([i, 200]);
  for (let i = 0; i < 3; i++) expect((await chat()).status).toBe(200);
  expect((await chat()).status).toBe(429);
  // The chat bucket empty, the other twenty are answered.
  for (let i = 10; i < 30; i++) expect([i, (await keyInfo()).status]).toEqual([i, 200]);
  // The thirty-first is refused in the gateway's words, with when to come back.
  const refused = await keyInfo();
  expect(refused.status).toBe(429);
  expect(Number(refused.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  expect(((await refused.json()) as any).error).toMatchObject({ type: "rate_limit_error", message: expect.stringContaining("/v1/key") });
});
