import { describe, expect, test } from "bun:test";
import { Elysia } from "elysia";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { useGateway, post, OPENAI_MODEL, ANTHROPIC_MODEL } from "../helpers/gateway.ts";

/**
 * The API routes are composed before the admin routes are added (src/app.ts): a global hook that
 * reads `headers` (as @elysiajs/bearer's derive did when the admin routes used it) makes a route
 * composed after it copy every request header into an object on each request
 * (`request.headers.toJSON()`), which none of the API routes reads. The admin token is now
 * checked on arrival (http/routes/admin.ts, adminGate). The test counts those copies while real
 * requests go through the gateway on loopback.
 */
const ADMIN_TOKEN = "admin-token-for-compose-test-0123456789abcdef0123456789abcdef";
const upstream = useFakeUpstream();
const EMBED = "test/embed";
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  adminToken: ADMIN_TOKEN,
  extraModels: [{ id: EMBED, provider: "fake-openai", upstream_model: "text-embedding-3-small", category: "embedding", context_length: 8192, pricing: { input_per_mtok: 20, output_per_mtok: 0 } }],
}));

const original = Headers.prototype.toJSON;
/** Runs `send` while counting every `Headers#toJSON` call in this process. */
async function countCopies(send: () => Promise<Response>): Promise<{ status: number; copies: number }> {
  let copies = 0;
  Headers.prototype.toJSON = function (this: Headers) {
    copies++;
    return original.call(this);
  };
  try {
    const res = await send();
    await res.arrayBuffer();
    return { status: res.status, copies };
  } finally {
    Headers.prototype.toJSON = original;
  }
}

describe("route composition", () => {
  test.each([
    ["/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] }],
    ["/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 16, messages: [{ role: "user", content: "hi" }] }],
    ["/v1/responses", { model: OPENAI_MODEL, input: "hi" }],
    ["/v1/embeddings", { model: EMBED, input: "hi" }],
  ] as const)("POST %s does not copy the request's headers into an object", async (path, body) => {
    const answer = await countCopies(() => post(gw, path, body));
    expect(answer.status).toBe(200);
    expect(answer.copies).toBe(0);
  });

  test("the admin routes read their bearer token", async () => {
    const url = `${gw.url}/v1/admin/accounts/${gw.accountId}`;
    expect((await fetch(url, { headers: { authorization: "Bearer wrong" } })).status).toBe(401);
    const allowed = await fetch(url, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(allowed.status).toBe(200);
    expect(((await allowed.json()) as { id: string }).id).toBe(gw.accountId);
  });

  test("the count sees the copy: a route composed after a global hook that reads headers makes one per request", async () => {
    const probe = new Elysia().derive({ as: "global" }, ({ headers }) => ({ auth: headers.authorization })).get("/", ({ auth }) => auth ?? "none");
    const answer = await countCopies(() => probe.handle(new Request("http://localhost/", { headers: { authorization: "Bearer x" } })));
    expect(answer).toEqual({ status: 200, copies: 1 });
  });
});
