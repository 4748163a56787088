/**
 * An account's on/off switch (docs/decisions.md, "An account's on/off switch"): the operator
 * suspends an account and every request of its keys is refused with a 403 until it is resumed.
 * Before it, shutting a tenant out took a spend limit of 0 (free models still answered), revoking
 * every key and removing its logins, and undoing that meant handing out new keys.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { Database } from "bun:sqlite";
import { useFakeUpstream, type Reply } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, FREE_MODEL, OPENAI_MODEL, post, startGateway, type Gateway } from "../helpers/gateway.ts";
import { until } from "../helpers/until.ts";
import { scripted } from "../helpers/scripted-answers.ts";

const ADMIN = "admin-suspension-0123456789abcdef0123456789ab";
const upstream = useFakeUpstream();
let gw: Gateway;
beforeAll(async () => {
  gw = await startGateway({ upstreamUrl: upstream.url, adminToken: ADMIN, retry: { max_retries: 0 } });
});
afterAll(() => gw?.stop());

const admin = (method: string, path: string, body?: unknown) =>
  fetch(`${gw.url}/v1/admin${path}`, { method, headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
const suspend = (suspended: boolean) => admin("PATCH", `/accounts/${gw.accountId}`, { suspended });
const chat = (stream = false) => post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, stream, messages: [{ role: "user", content: "hello" }] });
const records = () => gw.db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM usage_records").get()!.n;
const SAID = "This API key's account is suspended by the gateway's operator: its requests are refused until the operator resumes it.";

describe("a suspended account", () => {
  test("every request of its keys is a 403 permission_error in the client's format, free models too; nothing reaches the upstream, nothing is charged", async () => {
    const before = { balance: await gw.balanceMicro(), records: records(), upstream: upstream.requests.length };
    const patched = await suspend(true);
    expect(patched.status).toBe(200);
    const account = (await patched.json()) as { suspended_at: string | null; keys: { revoked_at: string | null }[] };
    expect(Date.parse(account.suspended_at!)).toBeGreaterThan(Date.now() - 60_000);
    // Its keys stay as they were: resuming needs no new key.
    expect(account.keys.every((k) => k.revoked_at === null)).toBe(true);
    try {
      const refused = await chat();
      expect(refused.status).toBe(403);
      expect(await refused.json()).toEqual({ error: { message: SAID, type: "permission_error", param: null, code: null } });
      expect((await chat(true)).status).toBe(403);
      const free = await post(gw, "/v1/chat/completions", { model: FREE_MODEL, messages: [{ role: "user", content: "hello" }] });
      expect(free.status).toBe(403);
      const messages = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 20, messages: [{ role: "user", content: "hello" }] });
      expect(messages.status).toBe(403);
      expect(await messages.json()).toMatchObject({ type: "error", error: { type: "permission_error", message: SAID } });
      expect((await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: "hello" })).status).toBe(403);
      expect((await post(gw, "/v1/embeddings", { model: OPENAI_MODEL, input: "hello" })).status).toBe(403);
      expect((await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${gw.key}` } })).status).toBe(403);
      expect(upstream.requests.length).toBe(before.upstream);
      await gw.app.services.settled();
      expect(await gw.balanceMicro()).toBe(before.balance);
      expect(records()).toBe(before.records);
    } finally {
      await suspend(false);
    }
  });

  test("the SDKs raise their PermissionDeniedError with the gateway's words, and do not retry it", async () => {
    await suspend(true);
    try {
      const asked = upstream.requests.length;
      const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 2 });
      const e1 = await openai.chat.completions.create({ model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] }).catch((e) => e);
      expect(e1).toBeInstanceOf(OpenAI.PermissionDeniedError);
      expect(e1.message).toContain("suspended by the gateway's operator");
      const anthropic = new Anthropic({ baseURL: gw.url, apiKey: gw.key, maxRetries: 2 });
      const e2 = await anthropic.messages.create({ model: ANTHROPIC_MODEL, max_tokens: 20, messages: [{ role: "user", content: "hi" }] }).catch((e) => e);
      expect(e2).toBeInstanceOf(Anthropic.PermissionDeniedError);
      expect(e2.message).toContain("suspended by the gateway's operator");
      expect(upstream.requests.length).toBe(asked);
    } finally {
      await suspend(false);
    }
  });

  test("GET /v1/key still answers, saying the account is suspended; a top-up still lands; resumed, the same key works again", async () => {
    await suspend(true);
    const info = await fetch(`${gw.url}/v1/key`, { headers: { authorization: `Bearer ${gw.key}` } });
    expect(info.status).toBe(200);
    expect(((await info.json()) as any).account.suspended).toBe(true);
    const balance = await gw.balanceMicro();
    const topUp = await admin("POST", `/accounts/${gw.accountId}/credits`, { amount: 2 });
    expect(topUp.status).toBe(200);
    expect(await gw.balanceMicro()).toBe(balance + 2_000_000);
    expect((await (await admin("GET", "/accounts?limit=500")).json() as any).data.find((a: any) => a.id === gw.accountId).suspended_at).toBeString();

    const resumed = await suspend(false);
    expect(((await resumed.json()) as any).suspended_at).toBeNull();
    const again = await chat();
    expect(again.status).toBe(200);
    expect(((await (await fetch(`${gw.url}/v1/key`, { headers: { authorization: `Bearer ${gw.key}` } })).json()) as any).account.suspended).toBe(false);
  });

  test("an answer under way when the account is suspended finishes and is charged; the next request is refused", async () => {
    // The role chunk and the first text, then held open until finishHeld() (the head waits for the first text).
    const answer = scripted("openai", { text: "Hi there" }) as Extract<Reply, { kind: "sse" }>;
    const held: Reply = { ...answer, chunks: answer.chunks.slice(0, 2), holdOpen: true, afterHold: answer.chunks.slice(2) };
    upstream.reply(held);
    const balance = await gw.balanceMicro();
    const stream = await chat(true);
    expect(stream.status).toBe(200);
    await until("the stream is open", 2_000, () => upstream.openStreams() === 1);
    await suspend(true);
    try {
      expect((await chat()).status).toBe(403);
      upstream.finishHeld();
      const text = await stream.text();
      expect(text).toContain("data: [DONE]");
      await gw.app.services.settled();
      expect(await gw.balanceMicro()).toBeLessThan(balance);
    } finally {
      await suspend(false);
    }
  });

  test("a request not yet answered when the account is suspended asks no upstream again: its stream failing before its first text falls back to nothing, a 403 that costs nothing", async () => {
    // The role chunk only, held open (the head waits for the first text); then a close, a failure
    // before anything reached the client, which would fall back to the next model of `models`.
    const opening = scripted("openai", { text: "Hi" }) as Extract<Reply, { kind: "sse" }>;
    upstream.reply({ ...opening, chunks: opening.chunks.slice(0, 1), holdOpen: true, afterHold: [] });
    const balance = await gw.balanceMicro();
    const asked = upstream.requests.length;
    const pending = post(gw, "/v1/chat/completions", { models: [OPENAI_MODEL, ANTHROPIC_MODEL], stream: true, messages: [{ role: "user", content: "hello" }] });
    await until("the stream is open", 2_000, () => upstream.openStreams() === 1);
    await suspend(true);
    try {
      upstream.finishHeld();
      const res = await pending;
      expect(res.status).toBe(403);
      expect(await res.json()).toEqual({ error: { message: SAID, type: "permission_error", param: null, code: null } });
      // The first model only: the fallback was not asked.
      expect(upstream.requests.length).toBe(asked + 1);
      await gw.app.services.settled();
      expect(await gw.balanceMicro()).toBe(balance);
    } finally {
      await suspend(false);
    }
  });

  test("suspended from another connection (the admin CLI, a second gateway on the file): refused within the change watch, resumed the same way", async () => {
    const other = new Database(gw.dbPath);
    try {
      expect((await chat()).status).toBe(200);
      other.query("UPDATE accounts SET suspended_at = ? WHERE id = ?").run(Date.now(), gw.accountId);
      await until("the other connection's suspension seen", 5_000, async () => (await chat()).status === 403, 50);
      other.query("UPDATE accounts SET suspended_at = NULL WHERE id = ?").run(gw.accountId);
      await until("the other connection's resumption seen", 5_000, async () => (await chat()).status === 200, 50);
    } finally {
      other.close();
    }
  });

  test("suspended must be true or false; an unknown account is a 404", async () => {
    const bad = await admin("PATCH", `/accounts/${gw.accountId}`, { suspended: "yes" });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as any).error.message).toContain("suspended");
    expect((await admin("PATCH", "/accounts/acct_missing", { suspended: true })).status).toBe(404);
    expect((await chat()).status).toBe(200);
  });
});
