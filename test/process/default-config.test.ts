/**
 * `switchyard --default-config` (here `bun src/index.ts --default-config`): the built-in config as
 * YAML. A config file replaces the built-in one whole, so an operator who wanted only a second
 * vendor key (a pool needs a file) lost every built-in model, price and Claude Code alias, with
 * nothing to start the file from (a new operator's probe). Printed, edited, and run as the file.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { startGatewayProcess } from "../helpers/gateway-process.ts";
import { startFakeUpstream, type FakeUpstream } from "../helpers/fake-upstream.ts";
import { defaultConfig } from "../../src/config/defaults.ts";

const ROOT = resolve(import.meta.dir, "../..");
let dir: string;
let upstream: FakeUpstream;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "switchyard-default-config-"));
  upstream = await startFakeUpstream();
});
afterAll(async () => {
  await upstream?.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function printDefaults(env: Record<string, string>): Promise<{ code: number; out: string; err: string }> {
  // A port and ledger of its own: without the flag this would start a gateway.
  const child = Bun.spawn(["bun", "src/index.ts", "--default-config"], { cwd: ROOT, env: { ...process.env, OPENAI_API_KEY: "", ANTHROPIC_API_KEY: "", PORT: "0", HOST: "127.0.0.1", SWITCHYARD_DB: join(dir, "printed.sqlite"), ...env }, stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, out, err };
}

test("prints the built-in config as YAML, with the models of the vendors whose keys are set", async () => {
  const bare = await printDefaults({});
  expect(bare.code).toBe(0);
  expect(bare.err).toBe("");
  expect(Bun.YAML.parse(bare.out)).toEqual(JSON.parse(JSON.stringify(defaultConfig({}))));
  const withOpenAI = await printDefaults({ OPENAI_API_KEY: "sk-not-printed" });
  expect(Bun.YAML.parse(withOpenAI.out)).toEqual(JSON.parse(JSON.stringify(defaultConfig({ OPENAI_API_KEY: "x" }))));
  // Variables' names, never their values.
  expect(withOpenAI.out).toContain("api_key_env: OPENAI_API_KEY");
  expect(withOpenAI.out).not.toContain("sk-not-printed");
});

test("the printed file, its OpenAI key made a pool of two, serves the built-in catalogue and aliases and uses both keys", async () => {
  const config = Bun.YAML.parse((await printDefaults({ OPENAI_API_KEY: "x" })).out) as ReturnType<typeof defaultConfig>;
  const openai = config.providers.find((p) => p.id === "openai")!;
  delete (openai as { api_key_env?: string }).api_key_env;
  Object.assign(openai, { base_url: `${upstream.url}/v1`, keys: [{ env: "OPENAI_KEY_A" }, { env: "OPENAI_KEY_B" }] });
  const file = join(dir, "switchyard.yaml");
  writeFileSync(file, Bun.YAML.stringify(config, null, 2));

  const gateway = await startGatewayProcess({
    SWITCHYARD_CONFIG: file, SWITCHYARD_DB: join(dir, "gw.sqlite"), OPENAI_API_KEY: "", ANTHROPIC_API_KEY: "",
    OPENAI_KEY_A: "sk-pool-a", OPENAI_KEY_B: "sk-pool-b",
  });
  try {
    const auth = { authorization: `Bearer ${gateway.key}`, "content-type": "application/json" };
    const models = (await (await fetch(`${gateway.url}/v1/models`, { headers: auth })).json()) as { data: { id: string }[] };
    const builtIn = defaultConfig({ OPENAI_API_KEY: "x" }).models.map((m) => m.id);
    expect(models.data.map((m) => m.id).sort()).toEqual([...builtIn].sort());
    // Claude Code's name reaches the built-in alias's model; a session-less request goes to a key at random.
    for (let i = 0; i < 20; i++) {
      const res = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: "POST", headers: auth,
        body: JSON.stringify({ model: i === 0 ? "claude-sonnet-5-5" : "openai/gpt-6-luna", max_tokens: 16, messages: [{ role: "user", content: `hello ${i}` }] }),
      });
      expect(res.status, await res.clone().text()).toBe(200);
      expect(((await res.json()) as { model: string }).model).toBe("openai/gpt-6-luna");
    }
    const keysUsed = new Set(upstream.requests.map((r) => r.headers.authorization));
    expect(keysUsed).toEqual(new Set(["Bearer sk-pool-a", "Bearer sk-pool-b"]));
  } finally {
    gateway.child.kill("SIGTERM");
    await gateway.child.exited;
  }
});
