import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { chromium, type Browser } from "playwright-core";
import { ConfigError, resolveSettings } from "../../src/config/load-config.ts";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, startGateway, useGateway, type Gateway } from "../helpers/gateway.ts";

/**
 * Browsers calling the model API from another origin (http/cors.ts): the preflight is answered
 * without a key, answers and refusals carry the headers a page needs to read them, the admin and
 * console routes never do, and `server.cors_origins` narrows or turns it off. Last, the same in a
 * real Chromium, which enforces CORS itself.
 */
const ADMIN = "admin-token-for-cors-tests-0123456789abcdef0123456789";
const PAGE_ORIGIN = "http://app.example.test:3000";
const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, adminToken: ADMIN }));

const chatBody = (stream = false) => JSON.stringify({ model: OPENAI_MODEL, max_tokens: 20, stream, messages: [{ role: "user", content: "hi" }] });

function preflight(url: string, path: string, origin = PAGE_ORIGIN, headers = "authorization, content-type, x-stainless-os, x-stainless-retry-count") {
  return fetch(`${url}${path}`, {
    method: "OPTIONS",
    headers: { origin, "access-control-request-method": "POST", "access-control-request-headers": headers },
  });
}

function post(url: string, path: string, key: string | undefined, body: string, origin: string | null = PAGE_ORIGIN) {
  return fetch(`${url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(origin ? { origin } : {}), ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body,
  });
}

describe("by default (any origin, as the vendors' APIs)", () => {
  test("a preflight gets 204 without a key: any origin, the methods, the headers asked for echoed, kept 2 hours", async () => {
    for (const path of ["/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/embeddings", "/v1/models", "/v1/messages/count_tokens"]) {
      const res = await preflight(gw.url, path);
      expect(res.status).toBe(204);
      expect(res.headers.get("access-control-allow-origin")).toBe("*");
      expect(res.headers.get("access-control-allow-methods")).toContain("POST");
      expect(res.headers.get("access-control-allow-headers")).toBe("authorization, content-type, x-stainless-os, x-stainless-retry-count");
      expect(res.headers.get("access-control-max-age")).toBe("7200");
      expect(await res.text()).toBe("");
    }
    // The Anthropic SDK's browser header is allowed like any other.
    const anthropic = await preflight(gw.url, "/v1/messages", PAGE_ORIGIN, "anthropic-dangerous-direct-browser-access,anthropic-version,x-api-key,content-type");
    expect(anthropic.headers.get("access-control-allow-headers")).toBe("anthropic-dangerous-direct-browser-access,anthropic-version,x-api-key,content-type");
  });

  test("a requested header list that is not a list of names is not echoed", async () => {
    const res = await preflight(gw.url, "/v1/chat/completions", PAGE_ORIGIN, "authorization, x-evil: 1");
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe("*");
    expect(res.headers.get("access-control-allow-headers")).toBeNull();
  });

  test("answers, streamed or not, and refusals carry the origin and the headers the SDKs read", async () => {
    const answer = await post(gw.url, "/v1/chat/completions", gw.key, chatBody());
    expect(answer.status).toBe(200);
    expect(answer.headers.get("access-control-allow-origin")).toBe("*");
    expect(answer.headers.get("access-control-expose-headers")).toContain("x-request-id");
    expect(answer.headers.get("access-control-expose-headers")).toContain("retry-after");
    await answer.json();

    const stream = await post(gw.url, "/v1/chat/completions", gw.key, chatBody(true));
    expect(stream.status).toBe(200);
    expect(stream.headers.get("content-type")).toContain("text/event-stream");
    expect(stream.headers.get("access-control-allow-origin")).toBe("*");
    expect(await stream.text()).toContain("data: [DONE]");

    const messages = await post(gw.url, "/v1/messages", gw.key, JSON.stringify({ model: ANTHROPIC_MODEL, max_tokens: 20, messages: [{ role: "user", content: "hi" }] }));
    expect(messages.status).toBe(200);
    expect(messages.headers.get("access-control-allow-origin")).toBe("*");
    expect(messages.headers.get("access-control-expose-headers")).toContain("request-id");
    await messages.json();

    // A page whose key is wrong can read why.
    const refused = await post(gw.url, "/v1/chat/completions", "svc-sk-not-a-real-key-000000000000000000000000", chatBody());
    expect(refused.status).toBe(401);
    expect(refused.headers.get("access-control-allow-origin")).toBe("*");
    expect(((await refused.json()) as { error: { type: string } }).error.type).toBeString();

    const models = await fetch(`${gw.url}/v1/models`, { headers: { origin: PAGE_ORIGIN, authorization: `Bearer ${gw.key}` } });
    expect(models.status).toBe(200);
    expect(models.headers.get("access-control-allow-origin")).toBe("*");
    await models.json();
  });

  test("a request without Origin (a server's) gets no CORS headers", async () => {
    const res = await post(gw.url, "/v1/chat/completions", gw.key, chatBody(), null);
    expect(res.status).toBe(200);
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    expect(res.headers.get("vary")).toBeNull();
    await res.json();
  });

  test("the admin API and the console are never open to other origins", async () => {
    const adminPreflight = await preflight(gw.url, "/v1/admin/accounts");
    expect(adminPreflight.headers.get("access-control-allow-origin")).toBeNull();
    await adminPreflight.text();
    const adminList = await fetch(`${gw.url}/v1/admin/accounts`, { headers: { origin: PAGE_ORIGIN, authorization: `Bearer ${ADMIN}` } });
    expect(adminList.status).toBe(200);
    expect(adminList.headers.get("access-control-allow-origin")).toBeNull();
    await adminList.text();
    const consolePreflight = await preflight(gw.url, "/console/api/session");
    expect(consolePreflight.headers.get("access-control-allow-origin")).toBeNull();
    await consolePreflight.text();
  });
});

describe("server.cors_origins", () => {
  let listed: Gateway;
  let off: Gateway;
  beforeAll(async () => {
    listed = await startGateway({ upstreamUrl: upstream.url, server: { cors_origins: [PAGE_ORIGIN, "https://other.example"] } });
    off = await startGateway({ upstreamUrl: upstream.url, server: { cors_origins: [] } });
  });
  afterAll(async () => {
    await listed.stop();
    await off.stop();
  });

  test("a listed origin is named back (whatever its case), with Vary: Origin", async () => {
    const res = await preflight(listed.url, "/v1/chat/completions", "HTTP://App.Example.Test:3000");
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe("HTTP://App.Example.Test:3000");
    expect(res.headers.get("vary")).toBe("Origin");
    const answer = await post(listed.url, "/v1/chat/completions", listed.key, chatBody());
    expect(answer.headers.get("access-control-allow-origin")).toBe(PAGE_ORIGIN);
    expect(answer.headers.get("vary")).toBe("Origin");
    await answer.json();
  });

  test("a request without Origin gets Vary: Origin too (its answer must not be reused for a page's)", async () => {
    const answer = await post(listed.url, "/v1/chat/completions", listed.key, chatBody(), null);
    expect(answer.headers.get("vary")).toBe("Origin");
    expect(answer.headers.get("access-control-allow-origin")).toBeNull();
    await answer.json();
  });

  test("another origin gets no CORS headers (the browser refuses), only Vary; the request itself is still judged as ever", async () => {
    const res = await preflight(listed.url, "/v1/chat/completions", "https://evil.example");
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    expect(res.headers.get("access-control-allow-methods")).toBeNull();
    expect(res.headers.get("vary")).toBe("Origin");
    const answer = await post(listed.url, "/v1/chat/completions", listed.key, chatBody(), "https://evil.example");
    expect(answer.status).toBe(200);
    expect(answer.headers.get("access-control-allow-origin")).toBeNull();
    await answer.json();
  });

  test("[] turns CORS off: no headers, and a preflight is not answered for the browser", async () => {
    const res = await preflight(off.url, "/v1/chat/completions");
    expect(res.status).not.toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    await res.text();
    const answer = await post(off.url, "/v1/chat/completions", off.key, chatBody());
    expect(answer.status).toBe(200);
    expect(answer.headers.get("access-control-allow-origin")).toBeNull();
    await answer.json();
  });

  test("an entry that is not an origin is a config error at start", () => {
    const config = (cors_origins: string[]) => ({ providers: [], models: [], server: { cors_origins } });
    for (const bad of ["https://app.example/", "app.example", "https://app.example/path", "*.example.com"]) {
      expect(() => resolveSettings(config([bad]), {}, "test")).toThrow(ConfigError);
    }
    expect(() => resolveSettings(config(["*", "https://app.example:8443", "http://localhost:5173"]), {}, "test")).not.toThrow();
  });
});

/** A page on another origin, in Chromium, calling the gateway with fetch as the SDKs do. */
describe("in a real browser", () => {
  const CHROMIUM = process.env.SWITCHYARD_CHROMIUM ?? "/usr/bin/chromium";
  let browser: Browser;
  let page: Bun.Server<unknown>;
  let listed: Gateway;
  beforeAll(async () => {
    if (!existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: apt-get install -y chromium (.ci/run does)`);
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
    // The page's origin differs from the gateway's by its port.
    page = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("<!doctype html><title>app</title>", { headers: { "content-type": "text/html" } }) });
    listed = await startGateway({ upstreamUrl: upstream.url, server: { cors_origins: ["https://only.example"] } });
  });
  afterAll(async () => {
    await browser?.close();
    page?.stop(true);
    await listed?.stop();
  });

  /** Runs in the page: a streamed chat request with the SDK's headers; what the script could read, or the browser's refusal. */
  async function callFromPage(gatewayUrl: string, key: string): Promise<{ ok: true; status: number; requestId: string | null; body: string } | { ok: false; error: string }> {
    const context = await browser.newContext();
    try {
      const tab = await context.newPage();
      await tab.goto(page.url.href);
      return await tab.evaluate(
        async ({ url, key, body }) => {
          try {
            const res = await fetch(`${url}/v1/chat/completions`, {
              method: "POST",
              headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "x-stainless-lang": "js" },
              body,
            });
            return { ok: true as const, status: res.status, requestId: res.headers.get("x-request-id"), body: await res.text() };
          } catch (err) {
            return { ok: false as const, error: String(err) };
          }
        },
        { url: gatewayUrl, key, body: chatBody(true) },
      );
    } finally {
      await context.close();
    }
  }

  test("by default the page's streamed request goes through and it reads the answer and its request id", async () => {
    const result = await callFromPage(gw.url, gw.key);
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(result.status).toBe(200);
    expect(result.requestId).toBeString();
    expect(result.body).toContain("data: [DONE]");
  });

  test("an origin not listed is refused by the browser, and nothing is charged", async () => {
    const before = await listed.balanceMicro();
    const result = await callFromPage(listed.url, listed.key);
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.error).toContain("Failed to fetch");
    // The preflight failed, so the request itself was never sent.
    expect(await listed.balanceMicro()).toBe(before);
  });
});
