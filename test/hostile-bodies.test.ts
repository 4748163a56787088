import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "./helpers/fake-upstream.ts";
import { useGateway, ANTHROPIC_MODEL, OPENAI_MODEL } from "./helpers/gateway.ts";
import { seededMutations } from "./helpers/seeded-mutations.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url }));

type Endpoint = "/v1/chat/completions" | "/v1/messages";
const base = (endpoint: Endpoint): Record<string, unknown> =>
  endpoint === "/v1/messages"
    ? { model: ANTHROPIC_MODEL, max_tokens: 10, messages: [{ role: "user", content: "hi" }] }
    : { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] };
const withField = (field: string, value: unknown) => (e: Endpoint) => JSON.stringify({ ...base(e), [field]: value });
const withMessage = (message: unknown) => (e: Endpoint) => JSON.stringify({ ...base(e), messages: [message] });

interface Row {
  name: string;
  body: (e: Endpoint) => string | Uint8Array;
  /** Expected status; "ok-or-4xx" where a valid-but-odd request may be answered. */
  status: number | "ok-or-4xx" | ((e: Endpoint) => number | "ok-or-4xx");
  contentType?: string | null;
}

const utf8 = (s: string) => new TextEncoder().encode(s);
const rows: Row[] = [
  { name: "invalid UTF-8 inside a string", body: (e) => Buffer.concat([utf8(JSON.stringify(base(e)).replace('"hi"', '"h')), Buffer.from([0xc3, 0x28, 0xff, 0xfe]), utf8('"}]}')]), status: 400 },
  { name: "truncated JSON", body: (e) => JSON.stringify(base(e)).slice(0, 25), status: 400 },
  { name: "empty body", body: () => "", status: 400 },
  { name: "whitespace only", body: () => "   \n ", status: 400 },
  { name: "JSON array", body: () => "[1,2,3]", status: 400 },
  { name: "JSON number", body: () => "42", status: 400 },
  { name: "JSON string", body: () => '"hello"', status: 400 },
  { name: "JSON null", body: () => "null", status: 400 },
  { name: "JSON true", body: () => "true", status: 400 },
  { name: "100,000 nested arrays", body: () => "[".repeat(100_000) + "]".repeat(100_000), status: 400 },
  { name: "100,000 nested objects in a field", body: (e) => JSON.stringify(base(e)).slice(0, -1) + ',"x":' + '{"a":'.repeat(100_000) + "1" + "}".repeat(100_000) + "}", status: "ok-or-4xx" },
  { name: "text/plain content type", body: (e) => JSON.stringify(base(e)), contentType: "text/plain", status: 400 },
  { name: "form content type", body: (e) => JSON.stringify(base(e)), contentType: "application/x-www-form-urlencoded", status: 400 },
  // Bytes, not a string: fetch gives a string body text/plain, which would hide a missing header.
  { name: "no content type", body: (e) => new TextEncoder().encode(JSON.stringify(base(e))), contentType: null, status: 400 },
  { name: "max_tokens 1e400", body: (e) => JSON.stringify(base(e)).slice(0, -1) + ',"max_tokens":1e400}', status: 400 },
  { name: "max_tokens 2^53+1", body: withField("max_tokens", 9007199254740993), status: 200 },
  { name: "max_tokens negative", body: withField("max_tokens", -1), status: 400 },
  { name: "max_tokens zero", body: withField("max_tokens", 0), status: 400 },
  { name: "max_tokens fractional", body: withField("max_tokens", 2.5), status: 400 },
  { name: "max_tokens string", body: withField("max_tokens", "100"), status: 400 },
  { name: "max_tokens boolean", body: withField("max_tokens", true), status: 400 },
  { name: "max_tokens array", body: withField("max_tokens", [100]), status: 400 },
  { name: "temperature string NaN", body: withField("temperature", "NaN"), status: 400 },
  { name: "temperature slightly negative", body: withField("temperature", -0.0001), status: 400 },
  { name: "temperature 1e400", body: (e) => JSON.stringify(base(e)).slice(0, -1) + ',"temperature":1e400}', status: 400 },
  { name: "temperature object", body: withField("temperature", { v: 1 }), status: 400 },
  { name: "stream as string", body: withField("stream", "yes"), status: 400 },
  { name: "content a number", body: withMessage({ role: "user", content: 42 }), status: 400 },
  { name: "content an object", body: withMessage({ role: "user", content: { text: "hi" } }), status: 400 },
  { name: "content nested arrays", body: withMessage({ role: "user", content: [[["hi"]]] }), status: 400 },
  { name: "content part without type", body: withMessage({ role: "user", content: [{ text: "hi" }] }), status: 400 },
  // Anthropic adds block types over time; on /v1/messages they pass through for the upstream to judge.
  { name: "content part of unknown type", body: withMessage({ role: "user", content: [{ type: "hologram", text: "hi" }] }), status: (e) => (e === "/v1/messages" ? "ok-or-4xx" : 400) },
  { name: "unknown role", body: withMessage({ role: "wizard", content: "hi" }), status: 400 },
  { name: "role missing", body: withMessage({ content: "hi" }), status: 400 },
  { name: "role a number", body: withMessage({ role: 1, content: "hi" }), status: 400 },
  { name: "message a string", body: withMessage("hi"), status: 400 },
  { name: "message null", body: withMessage(null), status: 400 },
  { name: "messages an object", body: withField("messages", { role: "user", content: "hi" }), status: 400 },
  { name: "messages a string", body: withField("messages", "hi"), status: 400 },
  { name: "messages missing", body: (e) => JSON.stringify({ model: base(e).model }), status: 400 },
  { name: "messages empty", body: withField("messages", []), status: 422 },
  { name: "10,000 messages", body: withField("messages", Array.from({ length: 10_000 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `m${i}` }))), status: "ok-or-4xx" },
  { name: "duplicate keys (last wins)", body: (e) => `{"model":"nobody/x",${JSON.stringify(base(e)).slice(1)}`, status: 200 },
  { name: "model empty string", body: withField("model", ""), status: 400 },
  { name: "model a number", body: withField("model", 7), status: 400 },
  { name: "model of 10 KB", body: withField("model", "x/" + "y".repeat(10_240)), status: 404 },
  { name: "model unknown", body: withField("model", "nobody/nothing"), status: 404 },
  { name: "models a string", body: withField("models", OPENAI_MODEL), status: 400 },
  { name: "models with a number", body: withField("models", [7]), status: 400 },
  { name: "models empty", body: withField("models", []), status: 400 },
  { name: "1 MB of content", body: withMessage({ role: "user", content: "z".repeat(1024 * 1024) }), status: "ok-or-4xx" },
  { name: "null bytes in strings", body: withMessage({ role: "user", content: "a\u0000b\u0000" }), status: 200 },
  { name: "lone surrogate escape", body: (e) => JSON.stringify(base(e)).replace('"hi"', '"\\ud800"'), status: 200 },
  { name: "tools not an array", body: withField("tools", { name: "x" }), status: 400 },
  { name: "tool without a name", body: withField("tools", [{ type: "function", function: {} }]), status: 400 },
  { name: "stop sequences a number", body: (e) => withField(e === "/v1/messages" ? "stop_sequences" : "stop", 5)(e), status: 400 },
  { name: "11 MiB body", body: (e) => JSON.stringify({ ...base(e), padding: "p".repeat(11 * 1024 * 1024) }), status: 413 },
];

const endpoints: Endpoint[] = ["/v1/chat/completions", "/v1/messages"];

describe.each(endpoints)("hostile bodies on %s", (endpoint) => {
  test.each(rows.map((r) => [r.name, r] as const))("%s", async (_name, row) => {
    const headers: Record<string, string> = { authorization: `Bearer ${gw.key}` };
    const contentType = row.contentType === undefined ? "application/json" : row.contentType;
    if (contentType) headers["content-type"] = contentType;
    const body = row.body(endpoint);
    const res = await fetch(`${gw.url}${endpoint}`, { method: "POST", headers, body });
    const text = await res.text();
    expect(res.status).toBeLessThan(500);
    const expected = typeof row.status === "function" ? row.status(endpoint) : row.status;
    if (expected === "ok-or-4xx") expect(res.status === 200 || (res.status >= 400 && res.status < 500)).toBe(true);
    else expect(res.status).toBe(expected);
    if (res.status >= 400) {
      const parsed = JSON.parse(text);
      expect(typeof parsed.error.message).toBe("string");
      expect(typeof parsed.error.type).toBe("string");
      if (endpoint === "/v1/messages") expect(parsed.type).toBe("error");
      expect(text).not.toMatch(/ at \/|\.ts:\d|node_modules/);
    }
  });
});

describe("random mutations of valid bodies (seeded)", () => {
  test("300 mutations: only 2xx/4xx, and the gateway still answers afterwards", async () => {
    const valid = [
      { model: OPENAI_MODEL, messages: [{ role: "system", content: "be brief" }, { role: "user", content: "hi" }], temperature: 0.5 },
      { model: OPENAI_MODEL, stream: true, messages: [{ role: "user", content: [{ type: "text", text: "hi" }] }], tools: [{ type: "function", function: { name: "f", parameters: { type: "object" } } }] },
      { model: ANTHROPIC_MODEL, max_tokens: 20, system: "be brief", messages: [{ role: "user", content: "hi" }] },
      { model: ANTHROPIC_MODEL, max_tokens: 20, stream: true, messages: [{ role: "user", content: [{ type: "text", text: "hi" }] }], tools: [{ name: "f", input_schema: { type: "object" } }] },
      { models: [OPENAI_MODEL, ANTHROPIC_MODEL], messages: [{ role: "user", content: "hi" }] },
    ];
    const garbage = [null, -1, 0, 1e308, "", "x".repeat(300), [], {}, [[]], true, { nested: { deeper: [1, { x: null }] } }];
    const { random, pick, mutate } = seededMutations(0x5eed, garbage, 4);
    const textMutations = [
      (s: string) => s.slice(0, Math.floor(random() * s.length)),
      (s: string) => s.replace(/"/, ""),
      (s: string) => `{"model":"a",${s.slice(1)}`,
      (s: string) => s.replace(/:/, ":::"),
      (s: string) => s + "garbage",
      (s: string) => s.replace(/\d+/, "9".repeat(400)),
    ];
    const statuses: number[] = [];
    for (let batch = 0; batch < 15; batch++) {
      await Promise.all(Array.from({ length: 20 }, async () => {
        const original = pick(valid);
        const endpoint: Endpoint = "max_tokens" in original ? "/v1/messages" : "/v1/chat/completions";
        let body = JSON.stringify(mutate(original));
        if (random() < 0.3) body = pick(textMutations)(body);
        const res = await fetch(`${gw.url}${endpoint}`, { method: "POST", headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" }, body });
        await res.text();
        statuses.push(res.status);
      }));
    }
    expect(statuses.length).toBe(300);
    for (const status of statuses) expect(status < 300 || (status >= 400 && status < 500)).toBe(true);
    expect(statuses.some((s) => s >= 400)).toBe(true);
    const alive = await fetch(`${gw.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" }, body: JSON.stringify(valid[0]) });
    expect(alive.status).toBe(200);
    expect((await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${gw.key}` } })).status).toBe(200);
  }, 30_000);
});

describe("broken auth headers", () => {
  const cases: [string, Record<string, string>][] = [
    ["empty bearer", { authorization: "Bearer " }],
    ["10 KB of garbage", { authorization: `Bearer ${"g".repeat(10_240)}` }],
    ["non-ASCII (Latin-1)", { authorization: "Bearer svc-sk-\u00e9\u00e8\u00ff\u00e0-0000000000000000000000000000" }],
    ["basic auth", { authorization: "Basic dXNlcjpwYXNz" }],
    ["both headers, both invalid", { authorization: "Bearer nope", "x-api-key": "svc-sk-also-nope-000000000000000000000000" }],
  ];
  test.each(cases)("%s → clean 401", async (_name, headers) => {
    const res = await fetch(`${gw.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(base("/v1/chat/completions")) });
    expect(res.status).toBe(401);
    expect(((await res.json()) as any).error.type).toBe("authentication_error");
  });
});
