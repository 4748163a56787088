import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { ConfigError, loadSettings, parseConfigText, resolveSettings } from "../../../src/config/load-config.ts";
import { createCatalogue } from "../../../src/catalogue/catalogue.ts";
import { upstreamTraits } from "../../../src/formats/common/model-traits.ts";

const dirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-config-"));
  dirs.push(dir);
  return dir;
}
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A minimal valid config; tests clone and break it. */
function validConfig() {
  return {
    providers: [
      { id: "up", kind: "openai", base_url: "http://127.0.0.1:9/v1/", api_key_env: "UP_KEY" },
      { id: "ant", kind: "anthropic", base_url: "https://api.anthropic.com" },
    ],
    models: [
      { id: "up/gpt", provider: "up", upstream_model: "gpt-4o-mini", category: "text", context_length: 128000, pricing: { input_per_mtok: 150, output_per_mtok: 600 } },
      { id: "up/free", provider: "up", upstream_model: "free", category: "free", context_length: 4096 },
    ],
  };
}

/** Runs `fn`, asserts it throws a ConfigError, and returns its message. */
function configError(fn: () => unknown): string {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(ConfigError);
  return (caught as ConfigError).message;
}

describe("built-in defaults", () => {
  test("no file and no SWITCHYARD_CONFIG → simulated models only", () => {
    const cwd = tempDir();
    const s = loadSettings({}, cwd);
    expect(s.source).toBe("built-in defaults");
    expect(s.models.map((m) => m.id)).toEqual(["switchyard/echo", "switchyard/pixel", "switchyard/lorem", "switchyard/embed"]);
    expect(s.models.find((m) => m.id === "switchyard/pixel")).toMatchObject({ category: "image", upstream_api: "images" });
    // The quick start's embedding model: simulated, OpenAI-format, cheap.
    expect(s.models.find((m) => m.id === "switchyard/embed")).toMatchObject({ category: "embedding", provider: "simulated", pricing: { input_per_mtok: 20, output_per_mtok: 0 } });
    const echo = s.models.find((m) => m.id === "switchyard/echo")!;
    expect(echo.category).toBe("free");
    expect(s.models.find((m) => m.id === "switchyard/lorem")!.category).not.toBe("free");
    expect([...s.providers.keys()].sort()).toEqual(["simulated", "simulated-anthropic"]);
    expect(s.models.some((m) => m.id.startsWith("openai/") || m.id.startsWith("anthropic/"))).toBe(false);
  });

  test("vendor keys in env add openai/* and anthropic/* models with apiKey from env", () => {
    const cwd = tempDir();
    const env = { OPENAI_API_KEY: "sk-openai-env-123", ANTHROPIC_API_KEY: "sk-ant-env-456" };
    const s = loadSettings(env, cwd);
    const ids = s.models.map((m) => m.id);
    expect(ids).toContain("switchyard/echo");
    expect(ids).toContain("switchyard/lorem");
    expect(ids.filter((id) => id.startsWith("openai/")).length).toBeGreaterThan(0);
    expect(ids.filter((id) => id.startsWith("anthropic/")).length).toBeGreaterThan(0);
    expect(s.providers.get("openai")!.apiKey).toBe("sk-openai-env-123");
    expect(s.providers.get("openai")!.kind).toBe("openai");
    expect(s.providers.get("anthropic")!.apiKey).toBe("sk-ant-env-456");
    expect(s.providers.get("anthropic")!.kind).toBe("anthropic");
    for (const m of s.models) expect(s.providers.has(m.provider)).toBe(true);
    // Image parts are refused on every path: the vendors' chat models are listed as text in, text out.
    for (const m of s.models.filter((m) => m.category === "text" && (m.id.startsWith("openai/") || m.id.startsWith("anthropic/")))) {
      expect([m.id, m.modalities]).toEqual([m.id, { input: ["text"], output: ["text"] }]);
    }
  });

  test("only OPENAI_API_KEY → openai models but no anthropic ones", () => {
    const s = loadSettings({ OPENAI_API_KEY: "sk-only-openai" }, tempDir());
    expect(s.models.some((m) => m.id.startsWith("openai/"))).toBe(true);
    expect(s.models.some((m) => m.id.startsWith("anthropic/"))).toBe(false);
    expect(s.providers.has("anthropic")).toBe(false);
    // OpenAI's embedding models come with its key.
    expect(s.models.filter((m) => m.category === "embedding" && m.provider === "openai").map((m) => m.id)).toEqual(["openai/text-embedding-3-small", "openai/text-embedding-3-large"]);
  });
});

describe("config files", () => {
  const yaml = `
providers:
  - id: up
    kind: openai
    base_url: http://127.0.0.1:9/v1
    api_key_env: UP_KEY
models:
  - id: up/gpt
    provider: up
    upstream_model: gpt-4o-mini
    category: text
    context_length: 128000
    pricing:
      input_per_mtok: 150
      output_per_mtok: 600
limits:
  requests_per_minute: 5
`;

  test("YAML file via SWITCHYARD_CONFIG (relative to cwd)", () => {
    const cwd = tempDir();
    writeFileSync(join(cwd, "gw.yaml"), yaml);
    const s = loadSettings({ SWITCHYARD_CONFIG: "gw.yaml", UP_KEY: "sk-yaml" }, cwd);
    expect(s.source).toBe(resolve(cwd, "gw.yaml"));
    expect(s.models.map((m) => m.id)).toEqual(["up/gpt"]);
    expect(s.models[0]!.upstream_model).toBe("gpt-4o-mini");
    // Cache prices left out take the family's published multiplier: gpt-4o's cached input is half price, writes cost input.
    expect(s.models[0]!.pricing).toEqual({ input_per_mtok: 150, output_per_mtok: 600, cache_read_per_mtok: 75, cache_write_per_mtok: 150, cache_write_1h_per_mtok: 150 });
    expect(s.providers.get("up")!.apiKey).toBe("sk-yaml");
    expect(s.limits.requests_per_minute).toBe(5);
    expect(s.limits.max_tokens_cap).toBe(8192);
  });

  test("JSON file via SWITCHYARD_CONFIG (absolute path)", () => {
    const cwd = tempDir();
    const path = join(tempDir(), "gw.json");
    const cfg = validConfig();
    writeFileSync(path, JSON.stringify(cfg));
    const s = loadSettings({ SWITCHYARD_CONFIG: path }, cwd);
    expect(s.source).toBe(path);
    expect(s.models.map((m) => m.id)).toEqual(["up/gpt", "up/free"]);
    expect([...s.providers.keys()]).toEqual(["up", "ant"]);
    // Trailing slashes are trimmed so paths can be appended.
    expect(s.providers.get("up")!.base_url).toBe("http://127.0.0.1:9/v1");
    expect(s.providers.get("up")!.apiKey).toBeUndefined();
  });

  test("./switchyard.yaml in cwd is used without SWITCHYARD_CONFIG", () => {
    const cwd = tempDir();
    writeFileSync(join(cwd, "switchyard.yaml"), yaml);
    const s = loadSettings({}, cwd);
    expect(s.source).toBe(join(cwd, "switchyard.yaml"));
    expect(s.models.map((m) => m.id)).toEqual(["up/gpt"]);
    expect(s.models.some((m) => m.id === "switchyard/echo")).toBe(false);
  });

  test("SWITCHYARD_CONFIG takes precedence over ./switchyard.yaml", () => {
    const cwd = tempDir();
    writeFileSync(join(cwd, "switchyard.yaml"), yaml);
    writeFileSync(join(cwd, "other.json"), JSON.stringify(validConfig()));
    const s = loadSettings({ SWITCHYARD_CONFIG: "other.json" }, cwd);
    expect(s.models.map((m) => m.id)).toEqual(["up/gpt", "up/free"]);
  });

  test("SWITCHYARD_CONFIG pointing to a missing file → ConfigError naming it", () => {
    const cwd = tempDir();
    const msg = configError(() => loadSettings({ SWITCHYARD_CONFIG: "nope.yaml" }, cwd));
    expect(msg).toContain(join(cwd, "nope.yaml"));
    expect(msg).toMatch(/does not exist/);
  });

  test("invalid file content through loadSettings names the file and the field", () => {
    const cwd = tempDir();
    const cfg = validConfig();
    (cfg.providers[0] as { kind: string }).kind = "mistral";
    writeFileSync(join(cwd, "bad.json"), JSON.stringify(cfg));
    const msg = configError(() => loadSettings({ SWITCHYARD_CONFIG: "bad.json" }, cwd));
    expect(msg).toContain(join(cwd, "bad.json"));
    expect(msg).toContain("/providers/0/kind");
  });
});

describe("parseConfigText", () => {
  test("parses .yaml, .yml and .json", () => {
    expect(parseConfigText("a: 1\nb: [x, y]\n", "c.yaml")).toEqual({ a: 1, b: ["x", "y"] });
    expect(parseConfigText("a: 1\n", "c.YML")).toEqual({ a: 1 });
    expect(parseConfigText('{"a": [1, 2]}', "c.json")).toEqual({ a: [1, 2] });
  });

  test("unparsable YAML → ConfigError naming the file", () => {
    const msg = configError(() => parseConfigText("providers: [unclosed\n  - id: x", "/etc/gw.yaml"));
    expect(msg).toContain("/etc/gw.yaml");
    expect(msg).toMatch(/cannot parse/);
  });

  test("unparsable YAML → the line it breaks at (Bun's parser says only \"Unexpected token\")", () => {
    const indented = "providers:\n  - id: a\n    kind: openai\n   base_url: x\nmodels: []\n";
    expect(configError(() => parseConfigText(indented, "gw.yaml"))).toContain("gw.yaml: cannot parse at or near line 4:");
    // A multi-line flow list before the fault parses only whole: the line found is still the fault's.
    const flow = "models: [\n  a,\n  b\n]\nlimits:\n  rpm: 1\n\tbad: 2\n";
    expect(configError(() => parseConfigText(flow, "gw.yaml"))).toContain("at or near line 7:");
    expect(configError(() => parseConfigText("[unclosed\n", "gw.yaml"))).toContain("at or near line 1:");
  });

  test("unparsable JSON → ConfigError", () => {
    const msg = configError(() => parseConfigText("{providers: ", "gw.json"));
    expect(msg).toContain("gw.json");
    expect(msg).toMatch(/cannot parse/);
  });

  test("unknown extension → ConfigError naming the extension", () => {
    const msg = configError(() => parseConfigText("[providers]", "gw.toml"));
    expect(msg).toContain(".toml");
    expect(msg).toMatch(/extension/);
  });
});

describe("validation names the field", () => {
  const resolveBroken = (mutate: (c: ReturnType<typeof validConfig>) => void) => {
    const cfg = validConfig();
    mutate(cfg);
    return configError(() => resolveSettings(cfg, {}, "test.yaml"));
  };

  test("an integer written as a string is refused, naming the field (it used to reach the vendor as the string)", () => {
    const cases: [(c: any) => void, string][] = [
      [(c) => (c.limits = { max_tokens_cap: "100" }), "/limits/max_tokens_cap"],
      [(c) => (c.limits = { requests_per_minute: "600" }), "/limits/requests_per_minute"],
      [(c) => (c.models[0].context_length = "128000"), "/models/0/context_length"],
      [(c) => (c.models[0].max_tokens_cap = "100"), "/models/0/max_tokens_cap"],
      [(c) => (c.providers[0].timeouts = { idle_ms: "1000" }), "/providers/0/timeouts/idle_ms"],
      [(c) => (c.retry = { max_retries: "2" }), "/retry/max_retries"],
    ];
    for (const [mutate, field] of cases) {
      const msg = resolveBroken(mutate);
      expect([field, msg]).toEqual([field, expect.stringContaining(`${field}: Expected integer`)]);
    }
    // As a file says it: quoted in YAML.
    const dir = tempDir();
    const file = join(dir, "switchyard.yaml");
    writeFileSync(file, `providers: [{id: up, kind: openai, base_url: "http://127.0.0.1:9/v1"}]
models: [{id: up/gpt, provider: up, upstream_model: gpt, category: free, context_length: 4096}]
limits: {max_tokens_cap: "100"}
`);
    expect(configError(() => loadSettings({ SWITCHYARD_CONFIG: file }))).toContain("/limits/max_tokens_cap: Expected integer");
    // Whole numbers as numbers still pass, and take their defaults when left out.
    const cfg = validConfig() as any;
    cfg.limits = { max_tokens_cap: 100 };
    const settings = resolveSettings(cfg, {}, "test.yaml");
    expect(settings.limits.max_tokens_cap).toBe(100);
    expect(settings.limits.requests_per_minute).toBe(60);
  });

  test("wrong kind value → /providers/0/kind", () => {
    const msg = resolveBroken((c) => ((c.providers[0] as { kind: string }).kind = "cohere"));
    expect(msg).toContain("test.yaml");
    expect(msg).toContain("/providers/0/kind");
  });

  test("a word outside a field's choices → the choices and what was given (not \"Expected union value\")", () => {
    expect(resolveBroken((c) => ((c.providers[0] as { kind: string }).kind = "openia"))).toContain('/providers/0/kind: must be one of openai, anthropic (got "openia")');
    expect(resolveBroken((c) => ((c.models[0] as { category: string }).category = "txt"))).toContain('/models/0/category: must be one of text, image, free, embedding (got "txt")');
    expect(resolveBroken((c) => ((c.models[0] as { reasoning?: unknown }).reasoning = 3))).toContain("/models/0/reasoning: must be one of none, effort, budget, adaptive (got 3)");
  });

  test("missing upstream_model → /models/1/upstream_model", () => {
    const msg = resolveBroken((c) => delete (c.models[1] as { upstream_model?: string }).upstream_model);
    expect(msg).toContain("/models/1/upstream_model");
  });

  test("unknown provider referenced by a model → /models/0/provider", () => {
    const msg = resolveBroken((c) => (c.models[0]!.provider = "ghost"));
    expect(msg).toContain("/models/0/provider");
    expect(msg).toContain("ghost");
  });

  test("duplicate model id → /models/1/id", () => {
    const msg = resolveBroken((c) => (c.models[1]!.id = c.models[0]!.id));
    expect(msg).toContain("/models/1/id");
    expect(msg).toMatch(/duplicate/);
    expect(msg).toContain("up/gpt");
  });

  test("duplicate provider id → /providers/1/id", () => {
    const msg = resolveBroken((c) => (c.providers[1]!.id = "up"));
    expect(msg).toContain("/providers/1/id");
    expect(msg).toMatch(/duplicate/);
  });

  test("non-free model without pricing → /models/0/pricing", () => {
    const msg = resolveBroken((c) => delete (c.models[0] as { pricing?: unknown }).pricing);
    expect(msg).toContain("/models/0/pricing");
  });

  test("a free model needs no pricing", () => {
    const cfg = validConfig();
    expect(cfg.models[1]).not.toHaveProperty("pricing");
    expect(resolveSettings(cfg, {}, "ok").models).toHaveLength(2);
  });

  test("an embedding model on an Anthropic-kind provider → /models/0/provider (Anthropic has no embeddings API)", () => {
    const msg = resolveBroken((c) => Object.assign(c.models[0]!, { provider: "ant", category: "embedding" }));
    expect(msg).toContain("/models/0/provider");
    expect(msg).toContain("embedding model needs a provider of kind openai");
    expect(msg).toContain('"ant" is anthropic');
  });

  test("upstream_api \"responses\": an OpenAI-kind provider's text (or free) model only", () => {
    const ok = validConfig();
    Object.assign(ok.models[0]!, { upstream_api: "responses" });
    expect(resolveSettings(ok, {}, "ok").models[0]!.upstream_api).toBe("responses");
    const anthropic = resolveBroken((c) => Object.assign(c.models[0]!, { provider: "ant", upstream_api: "responses" }));
    expect(anthropic).toContain("/models/0/upstream_api");
    expect(anthropic).toContain('"responses" needs a provider of kind openai');
    const image = resolveBroken((c) => Object.assign(c.models[0]!, { category: "image", upstream_api: "responses" }));
    expect(image).toContain('"responses" serves text models');
    const unknown = resolveBroken((c) => Object.assign(c.models[0]!, { upstream_api: "assistants" }));
    expect(unknown).toContain("/models/0/upstream_api");
  });

  test("a model served by the images API is an image (or free) model: its hold counts an image, its output tokens are image tokens", () => {
    for (const category of ["text"] as const) {
      const msg = resolveBroken((c) => Object.assign(c.models[0]!, { category, upstream_api: "images" }));
      expect(msg).toContain("/models/0/category");
      expect(msg).toContain('its category is "image"');
    }
    for (const category of ["image", "free"] as const) {
      const cfg = validConfig();
      Object.assign(cfg.models[0]!, { category, upstream_api: "images" });
      expect(resolveSettings(cfg, {}, "ok").models[0]!.category).toBe(category);
    }
  });

  test("an embedding model is not an images model → /models/0/upstream_api; on an openai provider it is valid", () => {
    const msg = resolveBroken((c) => Object.assign(c.models[0]!, { category: "embedding", upstream_api: "images" }));
    expect(msg).toContain("/models/0/upstream_api");
    const cfg = validConfig();
    Object.assign(cfg.models[0]!, { category: "embedding", pricing: { input_per_mtok: 20, output_per_mtok: 0 } });
    const model = resolveSettings(cfg, {}, "ok").models[0]!;
    expect(model.category).toBe("embedding");
    // Listed as an embedding model when the config names no modalities; its typical message is 1,000 input tokens, no output.
    expect(JSON.parse(createCatalogue([model]).listJson()).data[0]).toMatchObject({ category: "embedding", modalities: { input: ["text"], output: ["embedding"] }, credits_per_msg: 1 });
    const dear = { ...model, pricing: { input_per_mtok: 2_500, output_per_mtok: 10_000 } };
    expect(JSON.parse(createCatalogue([dear]).listJson()).data[0].credits_per_msg).toBe(3);
  });

  test("an embedding model needs pricing like any paid model → /models/0/pricing", () => {
    const msg = resolveBroken((c) => {
      Object.assign(c.models[0]!, { category: "embedding" });
      delete (c.models[0] as { pricing?: unknown }).pricing;
    });
    expect(msg).toContain("/models/0/pricing");
  });

  test("bad base_url → /providers/0/base_url", () => {
    const msg = resolveBroken((c) => (c.providers[0]!.base_url = "not a url"));
    expect(msg).toContain("/providers/0/base_url");
  });

  test("wrong type and missing top-level arrays are named", () => {
    const msg = resolveBroken((c) => ((c.models[0] as { context_length: unknown }).context_length = "big"));
    expect(msg).toContain("/models/0/context_length");
    const empty = configError(() => resolveSettings({}, {}, "empty.yaml"));
    expect(empty).toContain("/providers");
    expect(empty).toContain("/models");
    const notObject = configError(() => resolveSettings(null, {}, "null.yaml"));
    expect(notObject).toContain("null.yaml");
  });
});

describe("resolution", () => {
  test("responses: stored answers default to 256 MiB in all, 32 MiB an account, 16 MiB an answer, 1 hour; 0 bytes switches storage off; a negative size is named", () => {
    const quotas = { account_max_bytes: 32 * 1024 * 1024, answer_max_bytes: 16 * 1024 * 1024 };
    expect(resolveSettings(validConfig(), {}, "ok").responses).toEqual({ store_max_bytes: 256 * 1024 * 1024, ...quotas, store_ttl_ms: 3_600_000 });
    expect(resolveSettings({ ...validConfig(), responses: { store_max_bytes: 0 } }, {}, "ok").responses).toEqual({ store_max_bytes: 0, ...quotas, store_ttl_ms: 3_600_000 });
    expect(configError(() => resolveSettings({ ...validConfig(), responses: { account_max_bytes: 10 } }, {}, "bad.yaml"))).toContain("/responses/account_max_bytes");
    expect(configError(() => resolveSettings({ ...validConfig(), responses: { answer_max_bytes: 1.5 } }, {}, "bad.yaml"))).toContain("/responses/answer_max_bytes");
    expect(configError(() => resolveSettings({ ...validConfig(), responses: { store_max_bytes: -1 } }, {}, "bad.yaml"))).toContain("/responses/store_max_bytes");
    expect(configError(() => resolveSettings({ ...validConfig(), responses: { store_ttl_ms: 10 } }, {}, "bad.yaml"))).toContain("/responses/store_ttl_ms");
  });

  test("api_key_env resolves from env; a key written in the file is refused at load, without its value in the message", () => {
    const cfg = validConfig();
    const s = resolveSettings(cfg, { UP_KEY: "sk-from-env" }, "test");
    expect(s.providers.get("up")!.apiKey).toBe("sk-from-env");
    expect(s.providers.get("up")!.api_key_env).toBe("UP_KEY");
    // No api_key_env: no key at all.
    expect(s.providers.get("ant")!.apiKey).toBeUndefined();
    // Unset variable: undefined.
    expect(resolveSettings(cfg, {}, "test").providers.get("up")!.apiKey).toBeUndefined();
    Object.assign(cfg.providers[0]!, { apiKey: "sk-from-file-A" });
    Object.assign(cfg.providers[1]!, { api_key: "sk-from-file-B" });
    const msg = configError(() => resolveSettings(cfg, { UP_KEY: "sk-from-env" }, "test"));
    expect(msg).toContain("providers[0].apiKey: unknown field");
    expect(msg).toContain("providers[1].api_key: unknown field");
    expect(msg).not.toContain("sk-from-file");
  });

  test("an unknown field anywhere in the file is refused, named by its path, with the fields its object takes", () => {
    const cases: [(c: any) => void, string][] = [
      [(c) => (c.providers[1].keyz = [{ env: "K" }]), "providers[1].keyz: unknown field (this object takes: id, kind, base_url, api_key_env"],
      [(c) => (c.providers[0].timeouts = { total_ms: 1000, idle: 5 }), "providers[0].timeouts.idle: unknown field"],
      [(c) => (c.models[0].pricing.input_per_mtoks = 1), "models[0].pricing.input_per_mtoks: unknown field"],
      [(c) => (c.models[0].modalities = { input: ["text"], output: ["text"], video: [] }), "models[0].modalities.video: unknown field"],
      [(c) => (c.models[1].alias = ["x"]), "models[1].alias: unknown field"],
      [(c) => (c.limits = { requests_per_minit: 5 }), "limits.requests_per_minit: unknown field"],
      [(c) => (c.retry = { max_retry: 1 }), "retry.max_retry: unknown field"],
      [(c) => (c.server = { keepalive: 1 }), "server.keepalive: unknown field"],
      [(c) => (c.responses = { store_bytes: 1 }), "responses.store_bytes: unknown field"],
      [(c) => (c.alerts = { webhook: "http://x" }), "alerts.webhook: unknown field"],
      [(c) => (c.provider = []), "provider: unknown field (this object takes: providers, models"],
    ];
    for (const [breakIt, expected] of cases) {
      const cfg = validConfig();
      breakIt(cfg);
      expect(configError(() => resolveSettings(cfg, {}, "bad.yaml"))).toContain(expected);
    }
  });

  test("defaults for limits, server and timeouts", () => {
    const s = resolveSettings(validConfig(), {}, "test");
    expect(s.limits.max_tokens_cap).toBe(8192);
    expect(s.limits.requests_per_minute).toBe(60);
    expect(s.limits.max_body_bytes).toBe(10 * 1024 * 1024);
    expect(s.limits.max_frame_bytes).toBe(32 * 1024 * 1024);
    expect(s.limits.max_response_bytes).toBe(64 * 1024 * 1024);
    expect(s.server.keepalive_ms).toBe(15_000);
    expect(s.retry).toEqual({ max_retries: 2, max_wait_ms: 10_000 });
    for (const id of ["up", "ant"]) {
      expect(s.providers.get(id)!.timeouts).toEqual({ first_byte_ms: 120_000, whole_answer_ms: 600_000, idle_ms: 300_000, total_ms: 1_800_000 });
    }
  });

  test("partial limits and timeouts keep the given values and fill the rest", () => {
    const cfg = {
      ...validConfig(),
      limits: { max_tokens_cap: 1000 },
      server: { keepalive_ms: 500 },
    };
    Object.assign(cfg.providers[0]!, { timeouts: { idle_ms: 42 } });
    const s = resolveSettings(cfg, {}, "test");
    expect(s.limits.max_tokens_cap).toBe(1000);
    expect(s.limits.requests_per_minute).toBe(60);
    expect(s.server.keepalive_ms).toBe(500);
    expect(s.providers.get("up")!.timeouts).toEqual({ first_byte_ms: 120_000, whole_answer_ms: 600_000, idle_ms: 42, total_ms: 1_800_000 });
    expect(s.providers.get("ant")!.timeouts.idle_ms).toBe(300_000);
  });

  test("out-of-range limits are rejected with the field", () => {
    const cfg = { ...validConfig(), limits: { requests_per_minute: 0 } };
    expect(configError(() => resolveSettings(cfg, {}, "test"))).toContain("/limits/requests_per_minute");
    const cfg2 = validConfig();
    Object.assign(cfg2.providers[0]!, { timeouts: { total_ms: -1 } });
    expect(configError(() => resolveSettings(cfg2, {}, "test"))).toContain("/providers/0/timeouts/total_ms");
  });
});

describe("the real process", () => {
  test("a bad config file makes `bun src/index.ts` exit non-zero and name the field", async () => {
    const dir = tempDir();
    const cfg = validConfig();
    (cfg.providers[0] as { kind: string }).kind = "mistral";
    const path = join(dir, "bad.yaml");
    writeFileSync(path, Bun.YAML.stringify(cfg));
    const proc = Bun.spawn(["bun", "src/index.ts"], {
      cwd: resolve(import.meta.dir, "../../.."),
      env: { ...process.env, SWITCHYARD_CONFIG: path, PORT: "0", HOST: "127.0.0.1", SWITCHYARD_DB: join(dir, "db.sqlite") },
      stdout: "pipe",
      stderr: "pipe",
    });
    const timer = setTimeout(() => proc.kill(), 15_000);
    const [code, stderr] = await Promise.all([proc.exited, new Response(proc.stderr).text()]);
    clearTimeout(timer);
    expect(code).not.toBe(0);
    expect(proc.signalCode).toBeNull();
    expect(stderr).toContain("/providers/0/kind");
    expect(stderr).toContain(path);
  });
});

describe("model aliases and per-model caps", () => {
  const withAliases = (aliases: string[][]) => {
    const config = validConfig();
    config.models.forEach((m, i) => ((m as Record<string, unknown>).aliases = aliases[i] ?? []));
    return config;
  };

  test("an alias that is another model's id, or another model's alias, is refused naming the field", () => {
    expect(configError(() => resolveSettings(withAliases([["up/free"]]), {}, "f"))).toContain('/models/0/aliases/0: "up/free" is already a model id');
    expect(configError(() => resolveSettings(withAliases([["gpt-*"], ["x", "gpt-*"]]), {}, "f"))).toContain('/models/1/aliases/1: "gpt-*" is already an alias of up/gpt');
  });

  test("a `*` is only allowed at the end, and names have no spaces", () => {
    expect(configError(() => resolveSettings(withAliases([["gpt-*-mini"]]), {}, "f"))).toContain("/models/0/aliases/0");
    expect(configError(() => resolveSettings(withAliases([["a b"]]), {}, "f"))).toContain("/models/0/aliases/0");
  });

  test("resolution: the id, then an exact alias, then the longest matching prefix", () => {
    const catalogue = createCatalogue(resolveSettings(withAliases([["claude-*", "sonnet"], ["claude-haiku-*"]]), {}, "f").models);
    expect(catalogue.get("up/gpt")?.id).toBe("up/gpt");
    expect(catalogue.get("sonnet")?.id).toBe("up/gpt");
    expect(catalogue.get("claude-sonnet-4-5-20250929")?.id).toBe("up/gpt");
    expect(catalogue.get("claude-haiku-4-5")?.id).toBe("up/free");
    expect(catalogue.get("claude-")?.id).toBe("up/gpt");
    expect(catalogue.get("claud")).toBeUndefined();
    expect(catalogue.get("gpt-4o")).toBeUndefined();
  });

  test("max_tokens_cap per model is a positive integer", () => {
    const config = validConfig();
    (config.models[0] as Record<string, unknown>).max_tokens_cap = 0;
    expect(configError(() => resolveSettings(config, {}, "f"))).toContain("/models/0/max_tokens_cap");
    (config.models[0] as Record<string, unknown>).max_tokens_cap = 32_000;
    expect(resolveSettings(config, {}, "f").models[0]!.max_tokens_cap).toBe(32_000);
  });

  test("the built-in defaults route Claude Code's names: to Anthropic's models with its key, else OpenAI's, else the free echo", () => {
    const route = (env: Record<string, string>, name: string) => createCatalogue(loadSettings(env, tempDir()).models).get(name)?.id;
    for (const name of ["claude-sonnet-4-5", "claude-opus-5-5", "claude-haiku-4-5-20251001"]) expect(route({}, name)).toBe("switchyard/echo");
    // OpenAI's key alone: an Opus to GPT-6 Sol, any other Claude to GPT-6 Luna (current models both).
    for (const name of ["claude-sonnet-5-5", "claude-sonnet-4-5", "claude-haiku-4-5-20251001", "claude-fable-5-1"]) expect(route({ OPENAI_API_KEY: "sk-x" }, name)).toBe("openai/gpt-6-luna");
    for (const name of ["claude-opus-5-5", "claude-3-opus-20240229"]) expect(route({ OPENAI_API_KEY: "sk-x" }, name)).toBe("openai/gpt-6-sol");
    const both = { OPENAI_API_KEY: "sk-x", ANTHROPIC_API_KEY: "sk-ant-x" };
    // Sonnets, retired ones included (Sonnet 4.5 from 2026-11-30), and other Claudes go to the current Sonnet.
    for (const name of ["claude-sonnet-5-5", "claude-sonnet-4-5-20250929", "claude-sonnet-4-6", "claude-fable-5-1", "claude-3-7-sonnet-latest"]) expect(route(both, name)).toBe("anthropic/claude-sonnet-5-5");
    // An Opus asked for is an Opus.
    for (const name of ["claude-opus-5-5", "claude-opus-4-6", "claude-opus-4-1-20250805", "claude-3-opus-20240229"]) expect(route(both, name)).toBe("anthropic/claude-opus-5-5");
    for (const name of ["claude-haiku-4-5-20251001", "claude-haiku-5-5", "claude-3-5-haiku-20241022", "claude-3-haiku-20240307"]) expect(route(both, name)).toBe("anthropic/claude-haiku-4-5");
    // What each is sent as upstream, and its prices (Anthropic's table, 2026-11-30; credits per million tokens).
    const models = loadSettings(both, tempDir()).models;
    expect(models.find((m) => m.id === "anthropic/claude-sonnet-5-5")).toMatchObject({
      upstream_model: "claude-sonnet-5-5", context_length: 1_000_000,
      pricing: { input_per_mtok: 2_000, output_per_mtok: 10_000, cache_read_per_mtok: 100, cache_write_per_mtok: 2_500, cache_write_1h_per_mtok: 4_000 },
    });
    expect(models.find((m) => m.id === "anthropic/claude-opus-5-5")).toMatchObject({
      upstream_model: "claude-opus-5-5", context_length: 1_000_000,
      pricing: { input_per_mtok: 4_000, output_per_mtok: 20_000, cache_read_per_mtok: 200, cache_write_per_mtok: 5_000, cache_write_1h_per_mtok: 8_000 },
    });
    // Their 1M windows are billed flat: no long-context prices filled in.
    for (const id of ["anthropic/claude-sonnet-5-5", "anthropic/claude-opus-5-5"]) expect(models.find((m) => m.id === id)!.pricing!.long_context).toBeUndefined();
    // The retired Sonnet 4.5 is no longer offered by its own id.
    expect(models.some((m) => m.upstream_model === "claude-sonnet-4-5")).toBe(false);
  });
});

describe("the built-in OpenAI models (2026-11-30)", () => {
  const env = { OPENAI_API_KEY: "sk-x" };
  const models = () => loadSettings(env, tempDir()).models;
  const route = (env: Record<string, string>, name: string) => createCatalogue(loadSettings(env, tempDir()).models).get(name)?.id;

  test("none that OpenAI has shut down or shuts down within weeks: GPT-6 Luna and Sol, GPT-6.1 Sol, GPT Image 2.6, the embeddings", () => {
    expect(models().filter((m) => m.provider === "openai").map((m) => m.id)).toEqual([
      "openai/gpt-6-luna", "openai/gpt-6-sol", "openai/gpt-6.1-sol", "openai/gpt-image-2.6-flare", "openai/text-embedding-3-small", "openai/text-embedding-3-large",
    ]);
    // gpt-image-1 shut down on 2026-10-23; GPT-4o, GPT-4o mini, GPT-4.1 and GPT-4.1 mini shut down on 2027-01-14.
    for (const gone of ["gpt-image-1", "gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini"]) expect(models().some((m) => m.upstream_model === gone)).toBe(false);
  });

  test("at OpenAI's list prices (credits per million tokens), cached input, cache writes and the long-context prices included", () => {
    const byId = (id: string) => models().find((m) => m.id === id)!;
    // GPT-6 Luna: $0.10 / $0.01 cached / $0.125 writes ($0.25 for 12 hours) / $0.50; above 272K input 2× input and cache, 1.5× output.
    expect(byId("openai/gpt-6-luna")).toMatchObject({
      upstream_model: "gpt-6-luna", category: "text", context_length: 1_050_000,
      pricing: { input_per_mtok: 100, output_per_mtok: 500, cache_read_per_mtok: 10, cache_write_per_mtok: 125, cache_write_1h_per_mtok: 250,
        long_context: { above_tokens: 272_000, input_per_mtok: 200, output_per_mtok: 750, cache_read_per_mtok: 20, cache_write_per_mtok: 250, cache_write_1h_per_mtok: 500 } },
    });
    // GPT-6 Sol: $2 / $0.20 / $2.50 ($5 for 12 hours) / $10.
    expect(byId("openai/gpt-6-sol")).toMatchObject({
      upstream_model: "gpt-6-sol", context_length: 1_050_000,
      pricing: { input_per_mtok: 2_000, output_per_mtok: 10_000, cache_read_per_mtok: 200, cache_write_per_mtok: 2_500, cache_write_1h_per_mtok: 5_000,
        long_context: { above_tokens: 272_000, input_per_mtok: 4_000, output_per_mtok: 15_000, cache_read_per_mtok: 400 } },
    });
    // GPT-6.1 Sol: $2 / $0.10 / $2.50 / $10, through OpenAI's Responses API (it takes tools there only).
    expect(byId("openai/gpt-6.1-sol")).toMatchObject({
      upstream_model: "gpt-6.1-sol", upstream_api: "responses", context_length: 1_050_000,
      pricing: { input_per_mtok: 2_000, output_per_mtok: 10_000, cache_read_per_mtok: 100, cache_write_per_mtok: 2_500, cache_write_1h_per_mtok: 5_000,
        long_context: { above_tokens: 272_000, input_per_mtok: 4_000, output_per_mtok: 15_000, cache_read_per_mtok: 200 } },
    });
    // GPT Image 2.6 Flare: text input $5 (cached $1.25), image output tokens $30; no per-image price.
    expect(byId("openai/gpt-image-2.6-flare")).toMatchObject({
      upstream_model: "gpt-image-2.6-flare", upstream_api: "images", category: "image",
      pricing: { input_per_mtok: 5_000, output_per_mtok: 30_000, cache_read_per_mtok: 1_250, per_image: 0 },
    });
    expect(byId("openai/text-embedding-3-small").pricing).toMatchObject({ input_per_mtok: 20, output_per_mtok: 0 });
    expect(byId("openai/text-embedding-3-large").pricing).toMatchObject({ input_per_mtok: 130, output_per_mtok: 0 });
  });

  test("the names of OpenAI models shut down or shutting down, and this catalogue's ids of before, reach OpenAI's named replacement; other GPT names (Codex's default aside) are not taken", () => {
    for (const keys of [env, { ...env, ANTHROPIC_API_KEY: "sk-ant-x" }]) {
      for (const name of ["gpt-4o-mini", "gpt-4o", "gpt-4.1-mini", "gpt-4.1-2025-04-14", "gpt-4.1-nano", "openai/gpt-4o-mini", "openai/gpt-4o", "openai/gpt-4.1-mini"]) {
        expect([name, route(keys, name)]).toEqual([name, "openai/gpt-6-luna"]);
      }
      for (const name of ["gpt-image-1", "gpt-image-1.5", "gpt-image-1-mini", "openai/gpt-image-1"]) expect([name, route(keys, name)]).toEqual([name, "openai/gpt-image-2.6-flare"]);
      for (const id of ["openai/gpt-6-luna", "openai/gpt-6-sol", "openai/gpt-image-2.6-flare", "openai/text-embedding-3-small"]) expect(route(keys, id)).toBe(id);
      for (const name of ["gpt-6-luna", "gpt-6-astra", "gpt-6.1-terra", "gpt-5.5", "gpt-image-2.6-sunburst", "text-embedding-ada-002", "o3"]) expect([name, route(keys, name)]).toEqual([name, undefined]);
    }
    expect(route({ ANTHROPIC_API_KEY: "sk-ant-x" }, "gpt-4o-mini")).toBeUndefined();
    expect(route({}, "gpt-4o-mini")).toBeUndefined();
  });

  test("Codex's default model names (gpt-6.2-sol since 0.171, gpt-6.1-sol before, dated ones too) reach GPT-6.1 Sol, else Anthropic's Sonnet; without a vendor key they stay unknown", () => {
    for (const name of ["gpt-6.2-sol", "gpt-6.2-sol-2026-11-18", "gpt-6.1-sol", "gpt-6.1-sol-2026-09-29"]) {
      expect(route(env, name)).toBe("openai/gpt-6.1-sol");
      expect(route({ ...env, ANTHROPIC_API_KEY: "sk-ant-x" }, name)).toBe("openai/gpt-6.1-sol");
      expect(route({ ANTHROPIC_API_KEY: "sk-ant-x" }, name)).toBe("anthropic/claude-sonnet-5-5");
      expect(route({}, name)).toBeUndefined();
    }
    // Not a prefix of another name.
    expect(route(env, "gpt-6.1")).toBeUndefined();
    expect(route(env, "gpt-6.2")).toBeUndefined();
    expect(route(env, "gpt-6.2-astra")).toBeUndefined();
  });

  test("its text models reason by effort, and tool turns are sent reasoning_effort \"none\" (OpenAI's chat completions take tools on them only so)", () => {
    for (const id of ["openai/gpt-6-luna", "openai/gpt-6-sol"]) {
      const model = models().find((m) => m.id === id)!;
      expect(upstreamTraits("openai", model)).toMatchObject({ reasoning: "effort", toolsNeedNoReasoning: true });
    }
  });
});

describe("alerts", () => {
  test("absent: nothing configured; with a webhook URL: defaults, the secret from SWITCHYARD_ALERT_SECRET", () => {
    expect(resolveSettings(validConfig(), {}, "t").alerts).toBeUndefined();
    const s = resolveSettings({ ...validConfig(), alerts: { webhook_url: "https://hooks.example.com/switchyard", low_balance: 5 } }, { SWITCHYARD_ALERT_SECRET: "whsec" }, "t");
    expect(s.alerts).toEqual({ webhook_url: "https://hooks.example.com/switchyard", low_balance: 5, timeout_ms: 5_000, retry_initial_ms: 1_000, retry_max_ms: 60_000, secret: "whsec" });
    expect(resolveSettings({ ...validConfig(), alerts: { webhook_url: "http://127.0.0.1:9/h", retry_max_ms: 500, retry_initial_ms: 20 } }, {}, "t").alerts).toMatchObject({ low_balance: null, retry_max_ms: 500, retry_initial_ms: 20, secret: undefined });
  });

  test("an invalid webhook URL, a negative threshold or a low_balance without a URL is an error naming the field", () => {
    expect(configError(() => resolveSettings({ ...validConfig(), alerts: { webhook_url: "not a url" } }, {}, "t"))).toContain("/alerts/webhook_url");
    expect(configError(() => resolveSettings({ ...validConfig(), alerts: { webhook_url: "ftp://example.com/x" } }, {}, "t"))).toContain("/alerts/webhook_url");
    expect(configError(() => resolveSettings({ ...validConfig(), alerts: { webhook_url: "https://h.example", low_balance: -1 } }, {}, "t"))).toContain("/alerts/low_balance");
    expect(configError(() => resolveSettings({ ...validConfig(), alerts: { low_balance: 3 } }, {}, "t"))).toContain("/alerts/webhook_url");
    expect(configError(() => resolveSettings({ ...validConfig(), alerts: { webhook_url: "https://h.example", retry_initial_ms: 500, retry_max_ms: 100 } }, {}, "t"))).toContain("/alerts/retry_max_ms");
  });
});
