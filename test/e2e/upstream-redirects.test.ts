import { afterAll, describe, expect, test } from "bun:test";
import { startFakeUpstream, type RecordedRequest, type Reply } from "../helpers/fake-upstream.ts";
import { OPENAI_PRICING, post, startGateway, type Gateway, type GatewayOptions } from "../helpers/gateway.ts";

/**
 * Upstream redirects (transport/same-origin-redirect.ts): followed only to the request's own
 * origin (scheme, host and port), on every path, so a compatible server that redirects to itself
 * (a trailing slash) works, and a vendor key or a prompt never reaches an origin it names elsewhere.
 */
const SECRETS = { POOL_KEY_A: "sk-pool-A-SECRET-aaaaaaaaaaaaaaaaaaaa", POOL_KEY_B: "sk-pool-B-SECRET-bbbbbbbbbbbbbbbbbbbb" };
const ADMIN = { authorization: "Bearer admin-token-for-redirects" };
const MOVED_MODEL = "test/moved";

const upstream = await startFakeUpstream();
/** Another origin on the same host: what reaches it, and the answer a vendor would give. */
const seenElsewhere: { method: string; path: string; apiKey: string | null; authorization: string | null; body: string }[] = [];
const elsewhere = Bun.serve({
  port: 0,
  hostname: "127.0.0.1",
  async fetch(req) {
    seenElsewhere.push({ method: req.method, path: new URL(req.url).pathname, apiKey: req.headers.get("x-api-key"), authorization: req.headers.get("authorization"), body: await req.text() });
    if (req.method === "GET") return Response.json({ object: "list", data: [] });
    return Response.json({ id: "chatcmpl-elsewhere", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "from elsewhere" }, finish_reason: "stop" }], usage: { prompt_tokens: 5, completion_tokens: 5, total_tokens: 10 } });
  },
});
const upstreamPort = new URL(upstream.url).port;
const elsewhereUrl = `http://127.0.0.1:${elsewhere.port}`;
/** The fake upstream under a name of another origin: the same server, the same port. */
const sameServerOtherHost = upstream.url.replace("127.0.0.1", "localhost");
const started: Gateway[] = [];
afterAll(async () => {
  for (const gw of started) await gw.stop();
  await upstream.stop();
  elsewhere.stop(true);
});

async function gateway(o: Partial<GatewayOptions> = {}): Promise<Gateway> {
  upstream.reset();
  seenElsewhere.length = 0;
  const gw = await startGateway({
    upstreamUrl: upstream.url,
    vendorEnv: SECRETS,
    retry: { max_retries: 0 },
    // A provider whose base URL the server moved: every path under /old redirects (see `moved`).
    extraProviders: [{ id: "moved", kind: "openai", base_url: `${upstream.url}/old/v1`, api_key_env: "TEST_OPENAI_KEY" }],
    extraModels: [{ id: MOVED_MODEL, provider: "moved", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing: OPENAI_PRICING }],
    ...o,
  });
  started.push(gw);
  return gw;
}

const keyOf = (req: RecordedRequest) => req.headers.authorization?.replace(/^Bearer /, "") ?? "";
const redirect = (status: number, location: string): Reply => ({ kind: "text", status, headers: { location }, body: "" });
const question = { model: MOVED_MODEL, messages: [{ role: "user", content: "a private prompt" }] };
const offOrigin = (status: number) => [
  [`${elsewhereUrl}/v1/chat/completions`, status],
  [`${sameServerOtherHost}/v1/chat/completions`, status],
] as const;

describe("a chat request whose upstream redirects", () => {
  for (const via of ["our client", "fetch (a proxy configured)"] as const) {
    test(`${via}: a 307 or 308 to its own origin is followed, the prompt sent again there; the client gets the answer, billed once`, async () => {
      const gw = await gateway({ upstreamViaProxy: via !== "our client" });
      for (const status of [307, 308]) {
        // A relative Location, and an absolute one naming the origin as configured.
        for (const location of ["/v1/chat/completions", `${upstream.url}/v1/chat/completions`]) {
          upstream.requests.length = 0;
          upstream.rule((req) => (req.path.startsWith("/old/") ? redirect(status, location) : undefined));
          const before = await gw.balanceMicro();
          const res = await post(gw, "/v1/chat/completions", question);
          expect(res.status).toBe(200);
          const answer = (await res.json()) as any;
          expect(answer.choices[0].message.content.length).toBeGreaterThan(0);
          expect(upstream.requests.map((r) => [r.method, r.path, r.body?.messages?.[0]?.content])).toEqual([
            ["POST", "/old/v1/chat/completions", "a private prompt"],
            ["POST", "/v1/chat/completions", "a private prompt"],
          ]);
          expect(before - (await gw.balanceMicro())).toBeGreaterThan(0);
          expect(gw.app.services.ledger.openHolds()).toBe(0);
        }
      }
      upstream.rule(undefined);
    });

    test(`${via}: one to another origin (another port, another host name) is not followed: a 502, nothing charged, and that origin never sees the key or the prompt`, async () => {
      const gw = await gateway({ upstreamViaProxy: via !== "our client" });
      for (const [location, status] of [...offOrigin(307), ...offOrigin(308), [`https://127.0.0.1:${upstreamPort}/v1/chat/completions`, 307] as const]) {
        upstream.requests.length = 0;
        upstream.rule((req) => (req.path.startsWith("/old/") ? redirect(status, location) : undefined));
        const before = await gw.balanceMicro();
        const res = await post(gw, "/v1/chat/completions", question);
        expect(res.status).toBe(502);
        expect(await res.text()).not.toContain("elsewhere");
        expect(await gw.balanceMicro()).toBe(before);
        expect(upstream.requests.map((r) => r.path)).toEqual(["/old/v1/chat/completions"]);
      }
      expect(seenElsewhere).toEqual([]);
      upstream.rule(undefined);
    });

    test(`${via}: a same-origin loop ends after a few hops with a 502, nothing charged`, async () => {
      const gw = await gateway({ upstreamViaProxy: via !== "our client" });
      upstream.rule((req) => (req.path.startsWith("/old/") ? redirect(307, req.path) : undefined));
      const before = await gw.balanceMicro();
      const res = await post(gw, "/v1/chat/completions", question);
      expect(res.status).toBe(502);
      expect(await gw.balanceMicro()).toBe(before);
      // The request, then five redirects followed.
      expect(upstream.requests).toHaveLength(6);
      upstream.rule(undefined);
    });
  }
});

describe("a key probe whose model list redirects", () => {
  test("to its own origin (a trailing slash) is followed, and the disabled key is taken back; to another origin it is not, and the key never goes there", async () => {
    const gw = await gateway({ openaiKeys: [{ env: "POOL_KEY_A" }, { env: "POOL_KEY_B" }], adminToken: ADMIN.authorization.slice(7), keyProbeEveryMs: 60_000 });
    const refused: Reply = { kind: "json", status: 401, body: { error: { message: "Incorrect API key provided.", type: "invalid_request_error", code: "invalid_api_key" } } };
    let modelList: (req: RecordedRequest) => Reply | undefined = () => undefined;
    upstream.rule((req) => (req.method === "POST" && keyOf(req) === SECRETS.POOL_KEY_A ? refused : req.method === "GET" ? modelList(req) : undefined));
    const ask = () => post(gw, "/v1/chat/completions", { model: "test/gpt", messages: [{ role: "user", content: "hello" }] });
    while (!upstream.requests.some((r) => r.method === "POST" && keyOf(r) === SECRETS.POOL_KEY_A)) await (await ask()).arrayBuffer();
    const probeNow = async () => (await (await fetch(`${gw.url}/v1/admin/vendor-keys/fake-openai/POOL_KEY_A/probe`, { method: "POST", headers: ADMIN })).json()) as any;

    // Elsewhere: not followed, so the probe fails and the key stays out; the key never left for there.
    for (const [location, status] of [[`${elsewhereUrl}/v1/models`, 308], [`${sameServerOtherHost}/v1/models`, 301], [`${elsewhereUrl}/v1/models`, 307]] as const) {
      upstream.requests.length = 0;
      modelList = (req) => (req.path === "/v1/models" ? redirect(status, location) : undefined);
      expect(await probeNow()).toMatchObject({ accepted: false, state: "disabled" });
      expect(upstream.requests.map((r) => [r.method, r.path, r.headers.host])).toEqual([["GET", "/v1/models", `127.0.0.1:${upstreamPort}`]]);
    }
    expect(seenElsewhere).toEqual([]);

    // Its own origin, a trailing slash: followed with the key, accepted, and the key takes traffic again.
    upstream.requests.length = 0;
    modelList = (req) => (req.path === "/v1/models" ? redirect(308, "/v1/models/") : req.path === "/v1/models/" ? { kind: "json", body: { object: "list", data: [{ id: "gpt-4o-mini", object: "model", created: 1, owned_by: "system" }] } } : undefined);
    expect(await probeNow()).toEqual({ provider: "fake-openai", key: "POOL_KEY_A", state: "usable", accepted: true });
    expect(upstream.requests.map((r) => [r.method, r.path, keyOf(r)])).toEqual([
      ["GET", "/v1/models", SECRETS.POOL_KEY_A],
      ["GET", "/v1/models/", SECRETS.POOL_KEY_A],
    ]);
    upstream.rule(undefined);
  });
});
