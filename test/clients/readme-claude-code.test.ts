/**
 * The README's "Use with Claude Code" section, taken at its word: its variables are the only
 * configuration, every model name it mentions resolves in the built-in config (with no vendor key,
 * with OpenAI's, with Anthropic's, to the models it says), and Claude Code's recorded requests,
 * sent with those names to the gateway as the quick start runs it (built-in config, simulated
 * upstreams), are answered.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApp, type App } from "../../src/app.ts";
import { createCatalogue } from "../../src/catalogue/catalogue.ts";
import { loadSettings } from "../../src/config/load-config.ts";
import { readEnvironment } from "../../src/config/env.ts";
import { silentLogger } from "../../src/log/log.ts";
import { openDatabase } from "../../src/store/database.ts";
import { promptText } from "../../src/formats/prepare-upstream.ts";
import { sseFrames } from "../helpers/gateway.ts";
import { claudeCodeFixture, countTokensFixture } from "../helpers/claude-code.ts";

const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
const section = (() => {
  const start = readme.indexOf("\n## Use with Claude Code\n");
  expect(start).toBeGreaterThan(-1);
  const end = readme.indexOf("\n## ", start + 1);
  return readme.slice(start, end === -1 ? undefined : end);
})();
const shellBlocks = [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!);
const exported = Object.fromEntries([...shellBlocks[0]!.matchAll(/^export (\w+)=(\S+)$/gm)].map((m) => [m[1]!, m[2]!]));
/** Claude Code's own names the section says it asks for, and the gateway ids it passes with --model. */
const claudeNames = [...new Set([...section.matchAll(/`(claude-[a-z0-9-]+)`/g)].map((m) => m[1]!))];
const modelFlags = [...section.matchAll(/--model (\S+)/g)].map((m) => m[1]!);

const dir = mkdtempSync(join(tmpdir(), "switchyard-readme-"));
let app: App;
let url: string;
let key: string;

beforeAll(async () => {
  // The quick start: no config file, no vendor key.
  const settings = loadSettings({}, dir);
  app = createApp({ db: openDatabase(join(dir, "gateway.sqlite")), settings, log: silentLogger });
  const account = await app.services.accounts.createAccount("readme", 100 * 1e6);
  key = (await app.services.accounts.createKey(account.id, "readme"))!.key;
  app.listen({ port: 0, hostname: "127.0.0.1" });
  url = `http://127.0.0.1:${app.server!.port}`;
});
afterAll(async () => {
  await app.stop(true);
  await app.services.settled();
  rmSync(dir, { recursive: true, force: true });
});

describe("README: Use with Claude Code", () => {
  test("two variables and `claude`, nothing else: the base URL has no /v1 and is the default port, the key is a gateway key", () => {
    expect(Object.keys(exported).sort()).toEqual(["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"]);
    const base = new URL(exported.ANTHROPIC_BASE_URL!);
    expect(base.pathname).toBe("/");
    expect(base.port).toBe("8080");
    expect(readEnvironment({}).port).toBe(8080);
    expect(exported.ANTHROPIC_API_KEY).toStartWith("svc-sk-");
    expect(shellBlocks[0]).toMatch(/^claude$/m);
  });

  test("every model name it mentions resolves, to the models it says, whichever vendor keys the gateway has", () => {
    expect(claudeNames).toEqual(expect.arrayContaining(["claude-sonnet-5-5", "claude-opus-5-5", "claude-haiku-4-5", "claude-sonnet-4-5"]));
    const resolve = (env: Record<string, string>, name: string) => createCatalogue(loadSettings(env, dir).models).get(name)?.id;
    const anthropic = { ANTHROPIC_API_KEY: "sk-ant-x", OPENAI_API_KEY: "sk-x" };
    for (const name of claudeNames) {
      expect(resolve({}, name)).toBe("switchyard/echo");
      expect(resolve({ OPENAI_API_KEY: "sk-x" }, name)).toBe(name.startsWith("claude-opus-") ? "openai/gpt-6-sol" : "openai/gpt-6-luna");
      const tier = name.startsWith("claude-haiku-") ? "anthropic/claude-haiku-4-5" : name.startsWith("claude-opus-") ? "anthropic/claude-opus-5-5" : "anthropic/claude-sonnet-5-5";
      expect(resolve(anthropic, name)).toBe(tier);
    }
    for (const target of ["switchyard/echo", "openai/gpt-6-luna", "openai/gpt-6-sol", "anthropic/claude-sonnet-5-5", "anthropic/claude-opus-5-5", "anthropic/claude-haiku-4-5"]) expect(section).toContain(`\`${target}\``);
    expect(modelFlags.length).toBeGreaterThan(0);
    for (const id of modelFlags) expect(resolve({ OPENAI_API_KEY: "sk-x" }, id)).toBe(id);
  });

  test("Claude Code's own requests, with those names, are answered by the quick-start gateway", async () => {
    for (const name of claudeNames) {
      for (const fixture of ["sonnet-4-5.turn-1", "sonnet-4-5.turn-2", "opus-5-5.turn-1"]) {
        const call = claudeCodeFixture(fixture);
        const res = await fetch(url + call.path, { method: "POST", headers: { ...call.headers, "x-api-key": key }, body: JSON.stringify({ ...call.body, model: name }) });
        const text = await res.text();
        expect(res.status, text).toBe(200);
        const frames = sseFrames(text);
        expect(frames[0]!.event).toBe("message_start");
        expect(JSON.parse(frames[0]!.data).message.usage.input_tokens).toBeGreaterThan(1000);
        expect(frames.at(-1)!.event).toBe("message_stop");
      }
      const count = countTokensFixture();
      const res = await fetch(`${url}/v1/messages/count_tokens`, { method: "POST", headers: { ...count.headers, "x-api-key": key }, body: JSON.stringify({ ...count.bodies[18], model: name }) });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { input_tokens: number }).input_tokens).toBeGreaterThan(1000);
    }
    // The simulated Anthropic upstream counts too, as a real one would.
    const count = countTokensFixture();
    const body = { ...count.bodies[18], model: "switchyard/lorem" };
    const res = await fetch(`${url}/v1/messages/count_tokens`, { method: "POST", headers: { ...count.headers, "x-api-key": key }, body: JSON.stringify(body) });
    expect(await res.json()).toEqual({ input_tokens: Math.ceil(promptText("anthropic", body).length / 4) });
  });
});
