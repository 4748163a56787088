/**
 * Issue 33: client keys limited to models. A key carries `models` (exact ids or `prefix*`); any
 * other model is a 403 naming the key's models, in the route's error shape, before anything is
 * held or sent upstream; `GET /v1/models` (and `/v1/models/{id}`) show only what the key may use.
 * Aliases resolve first, then the check applies.
 */
import { expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { useGateway, type Gateway } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
const pricing = { input_per_mtok: 100, output_per_mtok: 100 };
const extraModels = [
  { id: "anthropic/claude-x", provider: "fake-anthropic", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 200_000, pricing, aliases: ["claude-*", "sonnet"] },
  { id: "anthropic/claude-y", provider: "fake-anthropic", upstream_model: "claude-haiku-4-5", category: "text", context_length: 200_000, pricing },
  { id: "openai/gpt-x", provider: "fake-openai", upstream_model: "gpt-4o-mini", category: "text", context_length: 128_000, pricing, aliases: ["gpt-latest"] },
  { id: "openai/embed-x", provider: "fake-openai", upstream_model: "text-embedding-3-small", category: "embedding", context_length: 8192, pricing: { input_per_mtok: 20, output_per_mtok: 0 } },
];
const ADMIN = "admin-token-key-models-0123456789abcdef";
const gw = useGateway(() => ({ upstreamUrl: upstream.url, extraModels, retry: { max_retries: 0 }, adminToken: ADMIN }));

/** A key of the test account limited to `models`. */
async function limitedKey(g: Gateway, models: string[]): Promise<string> {
  return (await g.app.services.accounts.createKey(g.accountId, { name: "scoped", models }))!.key;
}

function call(key: string, path: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(gw.url + path, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
}

const refusal = (model: string) => `This API key may not use model: ${model} (it is limited to anthropic/*). GET /v1/models lists the models it may use.`;
const hello = [{ role: "user", content: "hello" }];

test("a key limited to anthropic/* gets 403 for an OpenAI model on every route, in that route's shape, with nothing sent or charged", async () => {
  const key = await limitedKey(gw, ["anthropic/*"]);
  const before = await gw.balanceMicro();
  const openaiShape = (model: string) => ({ error: { message: refusal(model), type: "permission_error", param: null, code: null } });
  const anthropicShape = (model: string) => ({ type: "error", error: { type: "permission_error", message: refusal(model) } });
  const cases: [string, unknown, unknown][] = [
    ["/v1/chat/completions", { model: "openai/gpt-x", messages: hello }, openaiShape("openai/gpt-x")],
    ["/v1/chat/completions", { model: "openai/gpt-x", messages: hello, stream: true }, openaiShape("openai/gpt-x")],
    ["/v1/messages", { model: "openai/gpt-x", max_tokens: 50, messages: hello }, anthropicShape("openai/gpt-x")],
    ["/v1/messages/count_tokens", { model: "openai/gpt-x", messages: hello }, anthropicShape("openai/gpt-x")],
    ["/v1/responses", { model: "openai/gpt-x", input: "hello" }, openaiShape("openai/gpt-x")],
    ["/v1/embeddings", { model: "openai/embed-x", input: "hello" }, openaiShape("openai/embed-x")],
    // A fallback list is checked whole before the first call: an allowed first model does not let a refused one through.
    ["/v1/chat/completions", { model: "anthropic/claude-x", models: ["openai/gpt-x"], messages: hello }, openaiShape("openai/gpt-x")],
    // Aliases resolve first: `gpt-latest` is openai/gpt-x, and the refusal names it.
    ["/v1/chat/completions", { model: "gpt-latest", messages: hello }, openaiShape("openai/gpt-x")],
  ];
  for (const [path, body, expected] of cases) {
    const res = await call(key, path, body);
    expect({ path, status: res.status, body: await res.json() }).toEqual({ path, status: 403, body: expected });
  }
  expect(upstream.requests).toHaveLength(0);
  expect(await gw.balanceMicro()).toBe(before);
  // Counted as refusals of their own in /metrics.
  const metrics = await (await fetch(`${gw.url}/metrics`)).text();
  expect(metrics).toContain(`switchyard_rejections_total{reason="permission"} ${cases.length}\n`);
});

test("its own models are answered, also through an alias that resolves to one of them; an unknown model is still a 404", async () => {
  const key = await limitedKey(gw, ["anthropic/claude-x"]);
  const direct = await call(key, "/v1/chat/completions", { model: "anthropic/claude-x", messages: hello });
  expect(direct.status, await direct.text()).toBe(200);
  const aliased = await call(key, "/v1/messages", { model: "claude-sonnet-4-5-20250929", max_tokens: 50, messages: hello });
  expect(aliased.status, await aliased.text()).toBe(200);
  expect(upstream.requests.map((r) => r.body.model)).toEqual(["claude-sonnet-4-5", "claude-sonnet-4-5"]);
  // The same prefix, another model: an exact entry allows only that id.
  expect((await call(key, "/v1/chat/completions", { model: "anthropic/claude-y", messages: hello })).status).toBe(403);
  expect((await call(key, "/v1/chat/completions", { model: "nobody/none", messages: hello })).status).toBe(404);
});

test("GET /v1/models lists only the key's models (OpenAI and Anthropic shapes, aliases of its models only); other ids are 404s", async () => {
  const key = await limitedKey(gw, ["anthropic/*"]);
  const auth = { authorization: `Bearer ${key}` };
  const list = (await (await fetch(`${gw.url}/v1/models`, { headers: auth })).json()) as any;
  expect(list.data.map((m: any) => m.id)).toEqual(["anthropic/claude-x", "anthropic/claude-y"]);
  const anthropic = (await (await fetch(`${gw.url}/v1/models?limit=100`, { headers: { ...auth, "anthropic-version": "2023-06-01" } })).json()) as any;
  expect(anthropic.data.map((m: any) => m.id)).toEqual(["anthropic/claude-x", "anthropic/claude-y", "sonnet"]);
  expect((await fetch(`${gw.url}/v1/models/anthropic%2Fclaude-y`, { headers: auth })).status).toBe(200);
  const hidden = await fetch(`${gw.url}/v1/models/openai%2Fgpt-x`, { headers: auth });
  expect(hidden.status).toBe(404);
  expect((await fetch(`${gw.url}/v1/models/gpt-latest`, { headers: { ...auth, "anthropic-version": "2023-06-01" } })).status).toBe(404);
  // A key without a list still sees every model.
  const all = (await (await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${gw.key}` } })).json()) as any;
  expect(all.data.map((m: any) => m.id)).toContain("openai/gpt-x");
});

test("GET /v1/key shows the key's models", async () => {
  const key = await limitedKey(gw, ["anthropic/*", "openai/gpt-x"]);
  const info = (await (await fetch(`${gw.url}/v1/key`, { headers: { authorization: `Bearer ${key}` } })).json()) as any;
  expect(info.key.models).toEqual(["anthropic/*", "openai/gpt-x"]);
});

test("the admin API refuses a key's model list naming no configured model, or an alias, and saves one whose entries all match", async () => {
  const admin = (method: string, path: string, body: unknown) =>
    fetch(gw.url + path, { method, headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" }, body: JSON.stringify(body) });
  const refused = async (res: Response) => {
    expect(res.status).toBe(400);
    return ((await res.json()) as any).error as { type: string; message: string };
  };
  const create = (models: unknown) => admin("POST", `/v1/admin/accounts/${gw.accountId}/keys`, { name: "typed", models });
  const typo = await refused(await create(["anthropic/*", "anthropic/claude-z"]));
  expect(typo).toMatchObject({ type: "invalid_request_error", message: expect.stringContaining(`models: "anthropic/claude-z" matches no configured model. A key's list names model ids`) });
  // Lists match model ids after aliases resolve, so an alias would match nothing: its model is named.
  expect((await refused(await create(["sonnet"]))).message).toContain(`"sonnet" is an alias: list its model, "anthropic/claude-x"`);
  expect((await refused(await create(["claude-sonnet-4-5-20250929"]))).message).toContain(`is an alias: list its model, "anthropic/claude-x"`);
  expect((await refused(await create(["nobody/*"]))).message).toContain(`"nobody/*" matches no configured model`);
  const made = await create(["anthropic/*", "openai/gpt-x"]);
  expect(made.status).toBe(201);
  const { id } = (await made.json()) as { id: string };
  // A change is checked the same way, and a refused one leaves the key's list as it was.
  expect((await refused(await admin("PATCH", `/v1/admin/keys/${id}`, { models: ["gpt-latest"] }))).message).toContain(`"gpt-latest" is an alias: list its model, "openai/gpt-x"`);
  const after = await admin("PATCH", `/v1/admin/keys/${id}`, { models: ["openai/*"] });
  expect(after.status).toBe(200);
  expect(((await after.json()) as any).models).toEqual(["openai/*"]);
});
