import { describe, expect, test } from "bun:test";
import SwaggerParser from "@apidevtools/swagger-parser";
import { readFileSync } from "node:fs";
import { openApiPath, OPERATIONS } from "../../src/http/openapi.ts";
import { ChatRequest } from "../../src/formats/openai-chat/schema.ts";
import { CountTokensRequest, MessagesRequest } from "../../src/formats/anthropic-messages/schema.ts";
import { UsageReportQuery } from "../../src/http/routes/admin.ts";
import { EmbeddingsRequest } from "../../src/formats/openai-embeddings/schema.ts";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, startGateway, useGateway } from "../helpers/gateway.ts";
import { openApiChecker, seen, type SeenAnswer } from "../helpers/openapi-check.ts";
import { openRedisLimiter } from "../../src/store/stores.ts";

const upstream = useFakeUpstream();
const ADMIN = "admin-secret-0123456789abcdef0123456789abcdef";
const gw = useGateway(() => ({ upstreamUrl: upstream.url, adminToken: ADMIN }));
const plain = (schema: unknown) => JSON.parse(JSON.stringify(schema));

async function documentOf(url: string): Promise<any> {
  const res = await fetch(`${url}/openapi.json`);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toContain("application/json");
  expect(res.headers.get("x-request-id")).toBeTruthy();
  return res.json();
}

describe("GET /openapi.json", () => {
  test("is a valid OpenAPI 3.1 document (swagger-parser) with every route the app serves, each described", async () => {
    const doc = await documentOf(gw.url);
    expect(doc.openapi).toBe("3.1.0");
    expect(doc.info.version).toBe(JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")).version);
    // The validator mutates what it is given (dereferencing): hand it a copy.
    await SwaggerParser.validate(structuredClone(doc));

    // The console's own routes (/console, /console/api/*) are not client API and not documented (docs/decisions.md, "Console").
    const served = gw.app.routes.filter((r) => ["GET", "POST", "PUT", "PATCH", "DELETE"].includes(r.method) && !r.path.startsWith("/console")).map((r) => `${r.method} ${r.path}`);
    expect(gw.app.routes.some((r) => r.path.startsWith("/console/api/"))).toBe(true);
    expect(Object.keys(doc.paths).filter((p) => p.startsWith("/console"))).toEqual([]);
    expect(served.length).toBeGreaterThan(10);
    for (const route of served) {
      const [method, path] = route.split(" ") as [string, string];
      const op = doc.paths[openApiPath(path)]?.[method.toLowerCase()];
      expect([route, op !== undefined]).toEqual([route, true]);
      // A route added without its description here fails: src/http/openapi.ts, OPERATIONS.
      expect([route, route in OPERATIONS]).toEqual([route, true]);
      expect(op.summary).toBe(OPERATIONS[route]!.summary);
    }
    // No description for a route that does not exist.
    for (const route of Object.keys(OPERATIONS)) expect([route, served.includes(route)]).toEqual([route, true]);
  });

  test("docs/api.md names every route served (as `METHOD /path`, parameters as {id} or :id)", async () => {
    const reference = readFileSync(new URL("../../docs/api.md", import.meta.url), "utf8");
    const served = gw.app.routes.filter((r) => ["GET", "POST", "PUT", "PATCH", "DELETE"].includes(r.method));
    expect(served.length).toBeGreaterThan(10);
    const missing = served
      .map((r) => [r.method, r.path.replace("*", "{id}")] as const)
      .filter(([method, path]) => !reference.includes(`\`${method} ${path}\``) && !reference.includes(`\`${method} ${path.replace(/:(\w+)/g, "{$1}")}\``))
      .map(([method, path]) => `${method} ${path}`);
    expect(missing).toEqual([]);
  });

  test("the README's Endpoints table names every route served but the admin API's and the console's (as `METHOD /path`, parameters as {id})", () => {
    const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
    const start = readme.indexOf("\n## Endpoints\n");
    const table = readme.slice(start, readme.indexOf("\n## ", start + 1));
    const served = gw.app.routes
      .filter((r) => ["GET", "POST", "PUT", "PATCH", "DELETE"].includes(r.method) && !r.path.startsWith("/v1/admin") && !r.path.startsWith("/console"))
      .map((r) => `${r.method} ${r.path.replace("*", "{id}").replace(/:(\w+)/g, "{$1}")}`);
    expect(served.length).toBeGreaterThan(10);
    expect(served.filter((route) => !table.includes(`\`${route}\``))).toEqual([]);
  });

  test("request bodies and query parameters are the schemas the routes validate with", async () => {
    const doc = await documentOf(gw.url);
    const body = (path: string) => doc.paths[path].post.requestBody.content["application/json"].schema;
    expect(body("/v1/chat/completions")).toEqual(plain(ChatRequest));
    expect(body("/v1/messages")).toEqual(plain(MessagesRequest));
    expect(body("/v1/messages/count_tokens")).toEqual(plain(CountTokensRequest));
    expect(body("/v1/embeddings")).toEqual(plain(EmbeddingsRequest));
    expect(doc.paths["/v1/embeddings"].post.responses["200"].content["application/json"].schema.properties.data.items.properties.object).toEqual({ const: "embedding", type: "string" });
    const params = doc.paths["/v1/admin/usage"].get.parameters.filter((p: any) => p.in === "query");
    expect(params.map((p: any) => p.name)).toEqual(Object.keys(plain(UsageReportQuery).properties));
    const { description, ...granularity } = plain(UsageReportQuery).properties.granularity;
    expect(params.find((p: any) => p.name === "granularity")).toMatchObject({ description, schema: granularity });
    // Path parameters, security, errors in the client's shape, the request id everywhere.
    const account = doc.paths["/v1/admin/accounts/{id}"].get;
    expect(account.parameters[0]).toEqual({ name: "id", in: "path", required: true, schema: { type: "string" } });
    expect(account.security).toEqual([{ adminToken: [] }]);
    expect(doc.paths["/v1/messages"].post.responses["401"].content["application/json"].schema.$ref).toBe("#/components/schemas/AnthropicError");
    expect(doc.paths["/v1/chat/completions"].post.responses["401"].content["application/json"].schema.$ref).toBe("#/components/schemas/OpenAIError");
    expect(doc.paths["/v1/chat/completions"].post.responses["200"].content["text/event-stream"]).toBeDefined();
    expect(doc.paths["/health"].get.security).toEqual([]);
    for (const [path, item] of Object.entries<any>(doc.paths)) {
      for (const [method, op] of Object.entries<any>(item)) {
        expect([path, method, op.parameters.some((p: any) => p.$ref === "#/components/parameters/RequestId")]).toEqual([path, method, true]);
      }
    }
  });

  test("integers in answers are documented as {type: integer}: no numeric-string branch (Elysia's t.Integer), none anywhere in the document", async () => {
    const doc = await documentOf(gw.url);
    const stringly: string[] = [];
    const walk = (node: unknown, at: string) => {
      if (Array.isArray(node)) node.forEach((n, i) => walk(n, `${at}/${i}`));
      else if (node && typeof node === "object") {
        const o = node as Record<string, unknown>;
        if (o.type === "string" && o.format === "integer") stringly.push(at);
        for (const [k, v] of Object.entries(o)) walk(v, `${at}/${k}`);
      }
    };
    walk(doc, "");
    expect(stringly).toEqual([]);
    const model = doc.paths["/v1/models"].get.responses["200"].content["application/json"].schema;
    const item = (model.anyOf ?? model.oneOf ?? [model])[0].properties.data.items;
    expect(item.properties.context_length).toEqual({ type: "integer" });
  });

  test("real answers, success and error, are what the document says: the status is documented and the body valid (ajv)", async () => {
    const check = openApiChecker(await documentOf(gw.url));
    const key = { authorization: `Bearer ${gw.key}`, "content-type": "application/json" };
    const admin = { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" };
    const chat = (model: string, extra: object = {}) => ({ model, messages: [{ role: "user", content: "hi" }], ...extra });
    const created = JSON.parse((await seen(gw.url, "POST", "/v1/admin/accounts", { headers: admin, body: { name: "openapi", credits: 5 } })).body);
    const account = `/v1/admin/accounts/${created.id}`;
    const answers: SeenAnswer[] = [
      await seen(gw.url, "POST", "/v1/chat/completions", { headers: key, body: chat(OPENAI_MODEL) }),
      await seen(gw.url, "POST", "/v1/chat/completions", { headers: key, body: chat(ANTHROPIC_MODEL) }),
      // Errors whose param and code are strings: model_not_found, invalid_api_key, a field at fault.
      await seen(gw.url, "POST", "/v1/chat/completions", { headers: key, body: chat("nope/x") }),
      await seen(gw.url, "POST", "/v1/chat/completions", { headers: { "content-type": "application/json" }, body: chat(OPENAI_MODEL) }),
      await seen(gw.url, "POST", "/v1/chat/completions", { headers: key, body: chat(OPENAI_MODEL, { temperature: "hot" }) }),
      await seen(gw.url, "POST", "/v1/chat/completions", { headers: key, body: { model: OPENAI_MODEL, messages: [] } }),
      await seen(gw.url, "POST", "/v1/chat/completions", { headers: key, raw: "{nope" }),
      await seen(gw.url, "POST", "/v1/messages", { headers: key, body: { model: ANTHROPIC_MODEL, max_tokens: 50, messages: [{ role: "user", content: "hi" }] } }),
      await seen(gw.url, "POST", "/v1/messages", { headers: { "content-type": "application/json" }, body: {} }),
      await seen(gw.url, "POST", "/v1/messages/count_tokens", { headers: key, body: { model: ANTHROPIC_MODEL, messages: [{ role: "user", content: "hi" }] } }),
      await seen(gw.url, "POST", "/v1/responses", { headers: key, body: { model: OPENAI_MODEL, input: "hi" } }),
      await seen(gw.url, "GET", "/v1/responses/resp_nope", { headers: key }),
      await seen(gw.url, "GET", "/v1/responses/resp_nope?stream=true", { headers: key }),
      await seen(gw.url, "POST", "/v1/responses/input_tokens", { headers: key, body: { model: OPENAI_MODEL, input: "hi" } }),
      await seen(gw.url, "GET", "/v1/models", { headers: key }),
      // Anthropic's list shape, for its SDKs.
      await seen(gw.url, "GET", "/v1/models", { headers: { ...key, "anthropic-version": "2023-06-01" } }),
      await seen(gw.url, "GET", `/v1/models/${encodeURIComponent(OPENAI_MODEL)}`, { headers: key }),
      await seen(gw.url, "GET", "/v1/models/x%2Fy", { headers: key }),
      await seen(gw.url, "GET", "/v1/key", { headers: key }),
      await seen(gw.url, "GET", "/v1/key"),
      await seen(gw.url, "GET", "/health"),
      await seen(gw.url, "GET", "/ready"),
      await seen(gw.url, "GET", "/openapi.json"),
      await seen(gw.url, "POST", "/v1/admin/accounts", { headers: admin, body: { name: "", credits: -1 } }),
      await seen(gw.url, "GET", "/v1/admin/accounts?limit=2", { headers: admin }),
      await seen(gw.url, "GET", "/v1/admin/accounts?limit=0", { headers: admin }),
      await seen(gw.url, "GET", account, { headers: admin }),
      await seen(gw.url, "GET", "/v1/admin/accounts/acct_nope", { headers: admin }),
      await seen(gw.url, "PATCH", account, { headers: admin, body: { spend_limit: null } }),
      await seen(gw.url, "POST", `${account}/credits`, { headers: { ...admin, "idempotency-key": "openapi-1" }, body: { amount: 1 } }),
      // The same Idempotency-Key with another amount: 409.
      await seen(gw.url, "POST", `${account}/credits`, { headers: { ...admin, "idempotency-key": "openapi-1" }, body: { amount: 2 } }),
      await seen(gw.url, "POST", `${account}/keys`, { headers: admin, body: { name: "k" } }),
      await seen(gw.url, "GET", `${account}/keys`, { headers: admin }),
      await seen(gw.url, "GET", `${account}/usage`, { headers: admin }),
      await seen(gw.url, "GET", "/v1/admin/usage", { headers: admin }),
      await seen(gw.url, "GET", "/v1/admin/usage?format=csv", { headers: admin }),
      await seen(gw.url, "GET", "/v1/admin/vendor-keys", { headers: admin }),
      await seen(gw.url, "GET", "/v1/admin/accounts", { headers: { authorization: "Bearer wrong-wrong-wrong-wrong-wrong-wrong-0" } }),
      await seen(gw.url, "DELETE", "/v1/admin/keys/key_nope", { headers: admin }),
    ];
    // A vendor's own 400 names its field and code (strings, not null).
    upstream.reply({ kind: "json", status: 400, body: { error: { message: "Invalid value for 'temperature'", type: "invalid_request_error", param: "temperature", code: "invalid_value" } } });
    answers.push(await seen(gw.url, "POST", "/v1/chat/completions", { headers: key, body: chat(OPENAI_MODEL) }));
    const statuses = answers.map((a) => `${a.method} ${a.path} ${a.status}`);
    // The cases are the ones meant: each status the document was missing is among them.
    for (const meant of ["POST /v1/chat/completions 404", "GET /v1/responses/resp_nope?stream=true 400", `POST ${account}/credits 409`, "POST /v1/chat/completions 400"]) expect(statuses).toContain(meant);
    expect(JSON.parse(answers.at(-1)!.body).error).toMatchObject({ param: "temperature", code: "invalid_value" });
    expect(answers.map(check).filter(Boolean)).toEqual([]);
  });

  test("a suspended account's 403 is documented on every route its keys reach (GET /v1/key answers it 200)", async () => {
    const doc = await documentOf(gw.url);
    const check = openApiChecker(doc);
    const admin = { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" };
    const created = JSON.parse((await seen(gw.url, "POST", "/v1/admin/accounts", { headers: admin, body: { name: "openapi-suspended", credits: 5 } })).body);
    const minted = JSON.parse((await seen(gw.url, "POST", `/v1/admin/accounts/${created.id}/keys`, { headers: admin, body: {} })).body);
    expect((await seen(gw.url, "PATCH", `/v1/admin/accounts/${created.id}`, { headers: admin, body: { suspended: true } })).status).toBe(200);
    const key = { authorization: `Bearer ${minted.key}`, "content-type": "application/json" };
    const chat = { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] };
    const answers: SeenAnswer[] = [
      await seen(gw.url, "POST", "/v1/chat/completions", { headers: key, body: chat }),
      await seen(gw.url, "POST", "/v1/messages", { headers: key, body: { ...chat, max_tokens: 5 } }),
      await seen(gw.url, "POST", "/v1/messages/count_tokens", { headers: key, body: chat }),
      await seen(gw.url, "POST", "/v1/responses", { headers: key, body: { model: OPENAI_MODEL, input: "hi" } }),
      await seen(gw.url, "POST", "/v1/responses/input_tokens", { headers: key, body: { model: OPENAI_MODEL, input: "hi" } }),
      await seen(gw.url, "GET", "/v1/responses/resp_nope", { headers: key }),
      await seen(gw.url, "GET", "/v1/responses/resp_nope/input_items", { headers: key }),
      await seen(gw.url, "DELETE", "/v1/responses/resp_nope", { headers: key }),
      await seen(gw.url, "POST", "/v1/embeddings", { headers: key, body: { model: OPENAI_MODEL, input: "hi" } }),
      await seen(gw.url, "GET", "/v1/models", { headers: key }),
      await seen(gw.url, "GET", `/v1/models/${encodeURIComponent(OPENAI_MODEL)}`, { headers: key }),
    ];
    expect(answers.map((a) => `${a.method} ${a.path} ${a.status}`)).toEqual(answers.map((a) => `${a.method} ${a.path} 403`));
    expect(answers.map(check).filter(Boolean)).toEqual([]);
    // The key may still ask why, and the 403's text in the document says what it is.
    const own = await seen(gw.url, "GET", "/v1/key", { headers: key });
    expect([own.status, JSON.parse(own.body).account.suspended]).toEqual([200, true]);
    expect(check(own)).toBeUndefined();
    expect(doc.paths["/v1/key"].get.responses["403"]).toBeUndefined();
    expect(doc.paths["/v1/models"].get.responses["403"].description).toContain("suspended");
    expect(doc.paths["/v1/chat/completions"].post.responses["403"].description).toContain("`models` list");
  });

  test("a store that cannot be used answers 503s the document describes: GET /v1/models with Redis down", async () => {
    const limiter = openRedisLimiter("redis://127.0.0.1:1");
    const down = await startGateway({ upstreamUrl: upstream.url, limiter, adminToken: ADMIN });
    try {
      const check = openApiChecker(await documentOf(down.url));
      const key = { authorization: `Bearer ${down.key}` };
      const answers = [await seen(down.url, "GET", "/v1/models", { headers: key }), await seen(down.url, "GET", `/v1/models/${encodeURIComponent(OPENAI_MODEL)}`, { headers: key })];
      expect(answers.map((a) => a.status)).toEqual([503, 503]);
      expect(answers.map(check).filter(Boolean)).toEqual([]);
    } finally {
      await down.stop();
      limiter.close();
    }
  });

  test("without an admin token the admin routes are 404s, and still documented", async () => {
    const own = await startGateway({ upstreamUrl: upstream.url });
    try {
      expect((await fetch(`${own.url}/v1/admin/usage`)).status).toBe(404);
      const doc = await documentOf(own.url);
      expect(doc.paths["/v1/admin/usage"].get.summary).toBe("Usage report");
      expect(Object.keys(doc.paths).sort()).toEqual(Object.keys((await documentOf(gw.url)).paths).sort());
    } finally {
      await own.stop();
    }
  });

  test("every operation that takes a body documents the body cap's 413, the body deadline's 408 and a compressed body's 415; count_tokens its free-counting limits", async () => {
    const doc = await documentOf(gw.url);
    const withBody = Object.entries(doc.paths).flatMap(([path, ops]) =>
      Object.entries(ops as Record<string, any>).filter(([, op]) => op.requestBody).map(([method, op]) => [`${method} ${path}`, op] as const));
    expect(withBody.length).toBeGreaterThanOrEqual(10);
    for (const [name, op] of withBody) expect([name, ...["413", "408", "415"].map((s) => Object.keys(op.responses).includes(s))]).toEqual([name, true, true, true]);
    const count = doc.paths["/v1/messages/count_tokens"].post;
    expect(Object.keys(count.responses)).toEqual(["200", "400", "401", "403", "404", "408", "413", "415", "429", "503"]);
    for (const setting of ["count_tokens_max_bytes", "count_tokens_per_key_bytes", "count_tokens_queue_bytes", "count_tokens_timeout_ms", "count_tokens_account_bytes_per_minute"]) expect(count.description).toContain(setting);
  });
});
