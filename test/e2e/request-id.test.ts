import Anthropic from "@anthropic-ai/sdk";
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import type { Logger } from "../../src/log/log.ts";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, useGateway } from "../helpers/gateway.ts";

/** Every line the gateway logs, as JSON would carry it. */
const lines: { level: string; message: string; fields: Record<string, unknown> }[] = [];
const capture: Logger = (level, message, fields) => lines.push({ level, message, fields: JSON.parse(JSON.stringify(fields ?? {})) });

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, log: capture, adminToken: "admin-secret-0123456789abcdef0123456789abcdef", retry: { max_retries: 0 } }));
const hi = [{ role: "user", content: "Hello ids" }];
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

function recordOf(answerId: string): { client_request_id: string | null; request_id: string } | null {
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    const requestId = `req_${answerId.replace(/^(chatcmpl-|msg_)/, "")}`;
    return db.query<{ client_request_id: string | null; request_id: string }, [string]>("SELECT client_request_id, request_id FROM usage_records WHERE request_id = ?").get(requestId);
  } finally {
    db.close();
  }
}

describe("x-request-id", () => {
  test("a client's id is kept: echoed, sent upstream, stored with the usage record, on every log line about the request", async () => {
    const id = "client-Req.42:retry_1";
    // The first model fails (a log line from the pipeline), the second answers.
    upstream.reply({ kind: "json", status: 500, body: { error: { message: "boom", type: "server_error" } } });
    const res = await post(gw, "/v1/chat/completions", { models: [OPENAI_MODEL, ANTHROPIC_MODEL], messages: hi }, { "x-request-id": id });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-request-id")).toBe(id);
    const body = (await res.json()) as { id: string };
    // Both upstream attempts carried it.
    expect(upstream.requests.slice(-2).map((r) => r.headers["x-request-id"])).toEqual([id, id]);
    await gw.app.services.settled();
    // The record keeps its own req_ id, linked to the answer's id, and the client's id beside it.
    expect(recordOf(body.id)).toEqual({ request_id: `req_${body.id.slice("chatcmpl-".length)}`, client_request_id: id });
    const about = lines.filter((l) => l.fields.clientRequestId === id);
    expect(about.map((l) => l.message)).toEqual(["upstream error status", "falling back", "request"]);
    const access = about.at(-1)!.fields;
    expect(access.requestId).toBe(`req_${body.id.slice("chatcmpl-".length)}`);
    // No other line mentions the request without its id.
    expect(lines.filter((l) => l.fields.requestId === access.requestId && l.fields.clientRequestId !== id)).toEqual([]);
  });

  test("without one (or with one that is not sane), the gateway makes one and uses it everywhere", async () => {
    for (const given of [undefined, "", "has space", "x".repeat(129), "ünïcode", "a\"b"]) {
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: hi }, given === undefined ? {} : { "x-request-id": given });
      expect(res.status).toBe(200);
      const id = res.headers.get("x-request-id")!;
      expect(id).toMatch(UUID);
      expect(upstream.requests.at(-1)!.headers["x-request-id"]).toBe(id);
      await gw.app.services.settled();
      expect(recordOf(((await res.json()) as { id: string }).id)!.client_request_id).toBe(id);
    }
    // 128 characters of the allowed set are kept.
    const long = "A1._:-".repeat(21) + "zz";
    expect(long.length).toBe(128);
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: hi }, { "x-request-id": long });
    expect(res.headers.get("x-request-id")).toBe(long);
  });

  test("streams carry it too, in both formats", async () => {
    const openai = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: hi, stream: true }, { "x-request-id": "stream-1" });
    expect(openai.headers.get("x-request-id")).toBe("stream-1");
    expect(openai.headers.get("content-type")).toContain("text/event-stream");
    await openai.text();
    const anthropic = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 20, messages: hi, stream: true }, { "x-request-id": "stream-2" });
    expect(anthropic.headers.get("x-request-id")).toBe("stream-2");
    // Every stream's own headers beside the shared event-stream ones: nothing of one answer's in another's.
    expect([anthropic.headers.get("content-type"), anthropic.headers.get("cache-control"), anthropic.headers.get("x-accel-buffering")]).toEqual(["text/event-stream; charset=utf-8", "no-cache", "no"]);
    expect(anthropic.headers.get("request-id")).toBe("stream-2");
    expect(openai.headers.get("request-id")).toBeNull();
    await anthropic.text();
    expect(upstream.requests.at(-1)!.headers["x-request-id"]).toBe("stream-2");
  });

  test("every refusal and error echoes it: 401, 413 and 429 from admission, 400/404/422 from the errors plugin, 502, unknown routes, other routes", async () => {
    const chat = `${gw.url}/v1/chat/completions`;
    const cases: [string, () => Promise<Response>, number][] = [
      ["no-key", () => fetch(chat, { method: "POST", headers: { "x-request-id": "no-key" }, body: "{}" }), 401],
      ["too-big", () => fetch(chat, { method: "POST", headers: { "x-request-id": "too-big", authorization: `Bearer ${gw.key}` }, body: "x".repeat(11 * 1024 * 1024) }), 413],
      ["bad-json", () => post(gw, "/v1/chat/completions", "{not json", { "x-request-id": "bad-json" }), 400],
      ["no-model", () => post(gw, "/v1/chat/completions", { model: "no/such", messages: hi }, { "x-request-id": "no-model" }), 404],
      ["empty", () => post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 5, messages: [] }, { "x-request-id": "empty" }), 422],
      ["no-route", () => fetch(`${gw.url}/v1/nothing-here`, { headers: { "x-request-id": "no-route", authorization: `Bearer ${gw.key}` } }), 404],
      ["models", () => fetch(`${gw.url}/v1/models`, { headers: { "x-request-id": "models", authorization: `Bearer ${gw.key}` } }), 200],
      ["ready", () => fetch(`${gw.url}/ready`, { headers: { "x-request-id": "ready" } }), 200],
      ["admin", () => fetch(`${gw.url}/v1/admin/accounts/${gw.accountId}`, { headers: { "x-request-id": "admin", authorization: "Bearer admin-secret-0123456789abcdef0123456789abcdef" } }), 200],
      ["admin-401", () => fetch(`${gw.url}/v1/admin/accounts/${gw.accountId}`, { headers: { "x-request-id": "admin-401" } }), 401],
      ["upstream-502", () => {
        upstream.reply({ kind: "json", status: 500, body: { error: { message: "down", type: "server_error" } } });
        return post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: hi }, { "x-request-id": "upstream-502" });
      }, 502],
    ];
    for (const [id, send, status] of cases) {
      const res = await send();
      expect([id, res.status]).toEqual([id, status]);
      expect([id, res.headers.get("x-request-id")]).toEqual([id, id]);
      await res.arrayBuffer();
    }
    // A rate-limited key: the 429 echoes it as well.
    const admin = { authorization: "Bearer admin-secret-0123456789abcdef0123456789abcdef", "content-type": "application/json" };
    const limited = (await (await fetch(`${gw.url}/v1/admin/accounts/${gw.accountId}/keys`, { method: "POST", headers: admin, body: JSON.stringify({ rate_limit_per_minute: 1 }) })).json()) as { key: string };
    await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: hi }, { authorization: `Bearer ${limited.key}` })).arrayBuffer();
    const refused = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 5, messages: hi }, { authorization: `Bearer ${limited.key}`, "x-request-id": "limited" });
    expect(refused.status).toBe(429);
    expect(refused.headers.get("x-request-id")).toBe("limited");
    // Each of them has its access-log line under that id (probes that succeed have none: see access-log.test.ts).
    const logged = (id: string) => lines.find((l) => l.message === "request" && l.fields.clientRequestId === id)?.fields.status;
    for (const [id, , status] of cases) expect([id, logged(id)]).toEqual([id, id === "ready" ? undefined : status]);
    expect(logged("limited")).toBe(429);
  });

  test("Anthropic-format answers carry it as `request-id` too, which is the header the Anthropic SDK reads", async () => {
    const anthropic = new Anthropic({ baseURL: gw.url, apiKey: gw.key, maxRetries: 0 });
    const message = await anthropic.messages.create({ model: ANTHROPIC_MODEL, max_tokens: 20, messages: [{ role: "user", content: "Hello ids" }] });
    expect(message._request_id).toMatch(UUID);
    const failed = await anthropic.messages.create({ model: "no/such", max_tokens: 20, messages: [{ role: "user", content: "x" }] }).catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(Anthropic.APIError);
    expect((failed as InstanceType<typeof Anthropic.APIError>).status).toBe(404);
    expect((failed as InstanceType<typeof Anthropic.APIError>).requestID).toMatch(UUID);
    // Streams, refusals from admission, and a client's own id, kept.
    const stream = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 20, messages: hi, stream: true }, { "x-request-id": "anth-stream" });
    expect(stream.headers.get("request-id")).toBe("anth-stream");
    await stream.text();
    const noKey = await fetch(`${gw.url}/v1/messages`, { method: "POST", headers: { "x-request-id": "anth-401" }, body: "{}" });
    expect([noKey.status, noKey.headers.get("request-id")]).toEqual([401, "anth-401"]);
    // The SDK's model list, by its anthropic-version header.
    const models = await fetch(`${gw.url}/v1/models`, { headers: { "x-api-key": gw.key, "anthropic-version": "2023-06-01", "x-request-id": "anth-models" } });
    expect(models.headers.get("request-id")).toBe("anth-models");
    await models.arrayBuffer();
    // OpenAI-format answers keep to `x-request-id`.
    const openai = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: hi }, { "x-request-id": "oai-1" });
    expect([openai.headers.get("x-request-id"), openai.headers.get("request-id")]).toEqual(["oai-1", null]);
    await openai.arrayBuffer();
  });

  test("token counts send it to an Anthropic upstream", async () => {
    const res = await post(gw, "/v1/messages/count_tokens", { model: ANTHROPIC_MODEL, messages: hi }, { "x-request-id": "count-1" });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-request-id")).toBe("count-1");
    expect(upstream.requests.at(-1)!.path).toBe("/v1/messages/count_tokens");
    expect(upstream.requests.at(-1)!.headers["x-request-id"]).toBe("count-1");
  });
});
