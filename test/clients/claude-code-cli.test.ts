/**
 * The real Claude Code CLI, end to end through the gateway: `claude -p` writes a file with its
 * `Write` tool, reads the tool result and answers, streaming, for the three configurations that
 * used to fail (budgeted thinking, adaptive thinking with a system turn, an OpenAI upstream). The
 * fake upstream plays the model and refuses what the real vendors refuse. Then a tool loop as a
 * thinking model runs it (thinking, two parallel Read calls, one of a PNG, thinking again after
 * the results, on both upstream kinds), what Claude Code does with a 402 and a 502, and answers
 * whose first text comes after keepalive_ms (the head leaves without it).
 *
 * The CLI is not a dependency of the project (its native binary is 175 MB to download, 381 MB
 * unpacked, and every `bun install` would fetch it). Set CLAUDE_CODE_BIN to the binary; `.ci/run`
 * installs `@anthropic-ai/claude-code` outside the clone and sets it. Without it, this file skips
 * with a message saying so. It runs offline: a temporary HOME, nonessential traffic disabled, and
 * ANTHROPIC_BASE_URL on loopback.
 */
import { describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { useFakeUpstream, vendorRefusal } from "../helpers/fake-upstream.ts";
import { useGateway } from "../helpers/gateway.ts";
import { claudeCodeScript, FINAL_TEXT, WRITE_CONTENT, type TurnUsage } from "../helpers/claude-code.ts";
import { answerWith, responsesFrames, USAGE } from "../helpers/responses-wire.ts";
import { reasoningDialect, scripted, scriptedReply, withWait, SCRIPTED_SIGNATURE } from "../helpers/scripted-answers.ts";
import { MEDIA_LEFT_OUT } from "../../src/formats/common/content-text.ts";
import { until } from "../helpers/until.ts";

const bin = process.env.CLAUDE_CODE_BIN;
const available = bin !== undefined && existsSync(bin);
if (!available) {
  console.warn(`claude-code-cli.test.ts: SKIPPED — the Claude Code CLI is not installed (set CLAUDE_CODE_BIN to its binary; .ci/run installs @anthropic-ai/claude-code and sets it)${bin ? `; ${bin} does not exist` : ""}.`);
}

const upstream = useFakeUpstream({ strict: true });
const pricing = { input_per_mtok: 3000, output_per_mtok: 15000 };
/** Short, so an answer whose first text comes late finds the head gone first (see "the first text late"). */
const KEEPALIVE_MS = 400;
const ADMIN = "admin-claude-code-cli-0123456789abcdef0123";
/** The gateway's log: the statuses it answered Claude Code with. */
const logLines: { message: string; path?: string; status?: number }[] = [];
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  adminToken: ADMIN,
  log: (_level, message, fields) => logLines.push({ message, ...fields } as { message: string }),
  credits: 100_000,
  keepaliveMs: KEEPALIVE_MS,
  extraModels: [
    { id: "cc/claude", provider: "fake-anthropic", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 200_000, pricing, aliases: ["claude-*"] },
    { id: "openai/gpt-4.1", provider: "fake-openai", upstream_model: "gpt-4.1", category: "text", context_length: 1_047_576, pricing },
    // GPT-6.1 Sol as the built-in config serves it: through OpenAI's Responses API.
    { id: "openai/gpt-6.1-sol", provider: "fake-openai", upstream_model: "gpt-6.1-sol", upstream_api: "responses", category: "text", context_length: 1_050_000, pricing: { input_per_mtok: 2000, output_per_mtok: 10000 } },
  ],
}));

/** The CLI offline, on loopback: a temporary HOME, nonessential traffic off. */
function claudeEnv(home: string) {
  return {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    HOME: home,
    ANTHROPIC_BASE_URL: gw.url,
    ANTHROPIC_API_KEY: gw.key,
    DISABLE_TELEMETRY: "1",
    DISABLE_AUTOUPDATER: "1",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
  };
}

/** Asynchronous: the gateway answering it runs on this process's event loop. */
async function runClaude(model: string, work: string, home: string, options: { prompt?: string; tools?: string; key?: string; env?: Record<string, string>; args?: string[] } = {}) {
  const child = Bun.spawn({
    cmd: [bin!, "-p", options.prompt ?? "Write hello.txt containing a greeting", "--output-format", "json", "--model", model, "--allowedTools", options.tools ?? "Write", ...(options.args ?? [])],
    cwd: work,
    env: { ...claudeEnv(home), ...(options.key ? { ANTHROPIC_API_KEY: options.key } : {}), ...options.env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    timeout: 25_000,
  });
  const [stdout, stderr, exitCode] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { stdout, stderr, exitCode };
}

/**
 * A run's working directory and HOME (onboarding done), removed afterwards with the upstream's
 * queue and rules reset, whatever the test did.
 */
async function inClaudeDirs(run: (work: string, home: string) => Promise<void>): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), "switchyard-cc-work-"));
  const home = mkdtempSync(join(tmpdir(), "switchyard-cc-home-"));
  try {
    writeFileSync(join(home, ".claude.json"), JSON.stringify({ hasCompletedOnboarding: true }));
    await run(work, home);
  } finally {
    upstream.reset();
    rmSync(work, { recursive: true, force: true });
    rmSync(home, { recursive: true, force: true });
  }
}

describe.skipIf(!available)("Claude Code CLI through the gateway", () => {
  const cases = [
    { model: "claude-sonnet-4-5", upstream: "anthropic", what: "budgeted thinking, capped" },
    { model: "claude-opus-5-5", upstream: "anthropic", what: "adaptive thinking, a system turn" },
    { model: "openai/gpt-4.1", upstream: "openai", what: "translated to an OpenAI upstream" },
  ] as const;

  test.each(cases)("$model ($what): writes the file, reads the result, answers", async ({ model, upstream: kind }) => {
    await inClaudeDirs(async (work, home) => {
      const target = join(work, "hello.txt");
      for (let i = 0; i < 10; i++) upstream.reply(claudeCodeScript(target, { strict: true }));
      const run = await runClaude(model, work, home);
      const stdout = run.stdout;
      expect(run.exitCode, `${stdout}\n${run.stderr}`).toBe(0);
      const result = JSON.parse(stdout);
      expect(result).toMatchObject({ type: "result", subtype: "success", is_error: false, result: FINAL_TEXT, num_turns: 2 });
      expect(readFileSync(target, "utf8")).toBe(WRITE_CONTENT);

      const calls = upstream.requests.filter((r) => r.path === (kind === "openai" ? "/v1/chat/completions" : "/v1/messages"));
      expect(calls).toHaveLength(2);
      const [first, second] = calls.map((c) => c.body);
      expect(first.stream).toBe(true);
      if (kind === "openai") {
        expect(second.messages.at(-1)).toMatchObject({ role: "tool", tool_call_id: "call_script1" });
        expect(second.messages.filter((m: any) => m.role === "system").length).toBeGreaterThan(1);
      } else {
        expect(second.messages.at(-1).content[0]).toMatchObject({ type: "tool_result", tool_use_id: "toolu_script1" });
        if (model === "claude-sonnet-4-5") expect(first.thinking).toMatchObject({ type: "enabled", budget_tokens: 6144 });
        else {
          // Claude Code asks Opus 5.5 for adaptive thinking; `claude-*` sends it to Sonnet 4.5, which
          // takes a budget (adaptive thinking starts with 4.6): the gateway turns the effort into one.
          expect(first.thinking.type).toBe("enabled");
          expect(first.thinking.budget_tokens).toBeGreaterThanOrEqual(1024);
          expect(first.thinking.budget_tokens).toBeLessThan(first.max_tokens);
          expect(first.output_config?.effort).toBeUndefined();
          expect(first.messages.some((m: any) => m.role === "system")).toBe(true);
        }
      }
    });
  }, 30_000);

  test("a session whose every turn reports prompt caching is charged the vendor-priced sum, to the micro-credit", async () => {
    // Turn 1 writes the system prompt and tools to the cache (some for an hour); turn 2 reads them back.
    const turns: Record<1 | 2, TurnUsage> = {
      1: { input: 3, cacheRead: 0, cacheWrite5m: 1_500, cacheWrite1h: 500, output: 40 },
      2: { input: 7, cacheRead: 2_000, cacheWrite5m: 120, cacheWrite1h: 0, output: 25 },
    };
    // claude-sonnet-4-5 at 3,000 / 15,000 credits per million: reads 300, 5-minute writes 3,750, 1-hour writes 6,000.
    const priced = (u: TurnUsage) => u.input * 3_000 + u.cacheRead * 300 + u.cacheWrite5m * 3_750 + u.cacheWrite1h * 6_000 + u.output * 15_000;
    await inClaudeDirs(async (work, home) => {
      const target = join(work, "hello.txt");
      for (let i = 0; i < 10; i++) upstream.reply(claudeCodeScript(target, { strict: true, usage: (turn) => turns[turn] }));
      const before = await gw.balanceMicro();
      const run = await runClaude("claude-sonnet-4-5", work, home);
      expect(run.exitCode, `${run.stdout}\n${run.stderr}`).toBe(0);
      const result = JSON.parse(run.stdout);
      expect(result).toMatchObject({ type: "result", subtype: "success", result: FINAL_TEXT, num_turns: 2 });
      await gw.app.services.settled();
      const charged = before - (await gw.balanceMicro());
      expect(charged).toBe(priced(turns[1]) + priced(turns[2]));
      // What Claude Code's /cost shows (its own list prices for the name it asked for, cache
      // classes included) is the bill, at the catalogue's US$ 1 = 1,000 credits.
      expect(Math.round(result.total_cost_usd * 1_000 * 1_000_000)).toBe(charged);
      expect(result.modelUsage["claude-sonnet-4-5"]).toMatchObject({ cacheCreationEphemeral5mInputTokens: 1_620, cacheCreationEphemeral1hInputTokens: 500 });
      // Claude Code read the cache counts the gateway sent it, as from Anthropic.
      expect(result.usage).toMatchObject({
        input_tokens: turns[1].input + turns[2].input,
        cache_read_input_tokens: turns[2].cacheRead,
        cache_creation_input_tokens: turns[1].cacheWrite5m + turns[1].cacheWrite1h + turns[2].cacheWrite5m,
        output_tokens: turns[1].output + turns[2].output,
      });
    });
  }, 30_000);

  test("/model to a model served through OpenAI's Responses API: Claude Code's one-token check of it passes (OpenAI's floor is 16), and the next turn is that model's", async () => {
    const work = mkdtempSync(join(tmpdir(), "switchyard-cc-work-"));
    const home = mkdtempSync(join(tmpdir(), "switchyard-cc-home-"));
    // A session driven as the Agent SDK drives it (stream-json): `set_model` switches as `/model` does,
    // after the same check (`max_tokens: 1`), and keeps the old model when the check is refused.
    const child = Bun.spawn({
      cmd: [bin!, "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose", "--model", "claude-sonnet-4-5"],
      cwd: work,
      env: claudeEnv(home),
      stdin: "pipe",
      stdout: "pipe",
      stderr: "pipe",
      timeout: 25_000,
    });
    const stderr = new Response(child.stderr).text();
    const lines = jsonLines(child.stdout);
    const next = async (type: string) => {
      for (;;) {
        const { value, done } = await lines.next();
        if (done) throw new Error(`the CLI ended before a ${type} line: ${await stderr}`);
        if (value.type === type) return value;
      }
    };
    const send = (message: unknown) => {
      child.stdin.write(`${JSON.stringify(message)}\n`);
      child.stdin.flush();
    };
    try {
      writeFileSync(join(home, ".claude.json"), JSON.stringify({ hasCompletedOnboarding: true }));
      upstream.rule((rec) => (rec.path === "/v1/responses" ? answerWith({ items: [{ text: FINAL_TEXT }], usage: USAGE(40, 16) })(rec) : undefined));
      send({ type: "control_request", request_id: "switch_1", request: { subtype: "set_model", model: "openai/gpt-6.1-sol" } });
      const switched = await next("control_response");
      expect(switched.response, JSON.stringify(switched)).toMatchObject({ subtype: "success", request_id: "switch_1" });
      const check = upstream.requests.find((r) => r.path === "/v1/responses")!;
      expect(check.body).toMatchObject({ model: "gpt-6.1-sol", max_output_tokens: 16 });

      send({ type: "user", message: { role: "user", content: "Say hello" }, parent_tool_use_id: null, session_id: "" });
      const result = await next("result");
      expect(result).toMatchObject({ subtype: "success", is_error: false, result: FINAL_TEXT });
      child.stdin.end();
      expect(await child.exited, await stderr).toBe(0);
      // The check and the turn, both OpenAI's, each charged what it reported.
      expect(upstream.requests.map((r) => r.path)).toEqual(["/v1/responses", "/v1/responses"]);
      await gw.app.services.settled();
      const records = gw.db.query<{ cost_micro: number; status: string }, []>("SELECT cost_micro, status FROM usage_records WHERE model = 'openai/gpt-6.1-sol'").all();
      expect(records).toEqual([{ cost_micro: 40 * 2000 + 16 * 10000, status: "ok" }, { cost_micro: 40 * 2000 + 16 * 10000, status: "ok" }]);
    } finally {
      child.kill();
      upstream.reset();
      rmSync(work, { recursive: true, force: true });
      rmSync(home, { recursive: true, force: true });
    }
  }, 30_000);
});

describe.skipIf(!available)("Claude Code CLI through the gateway: a tool loop as the model really runs it", () => {
  // A 2×2 PNG: Claude Code's Read puts an image block in the tool result.
  const PNG = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAFklEQVR4nGP8z8DAwMDAxMDAwMDAAAANHQEDasKb6QAAAABJRU5ErkJggg==", "base64");
  const ANSWER = "a.txt says alpha; the picture could not be seen.";

  test.each([
    { model: "claude-sonnet-4-5", vendor: "anthropic" as const },
    { model: "openai/gpt-4.1", vendor: "openai" as const },
  ])("$model: thinking, then two Read calls in one turn (one of a PNG), then thinking again after the results; every turn passes the vendor's checks (signed thinking first in the turn it continues)", async ({ model, vendor }) => {
    await inClaudeDirs(async (work, home) => {
      writeFileSync(join(work, "a.txt"), "alpha\n");
      writeFileSync(join(work, "pic.png"), PNG);
      const id = (n: number) => (vendor === "openai" ? `call_read${n}` : `toolu_read${n}`);
      const dialect = reasoningDialect(vendor);
      // Refused as the vendor refuses (Anthropic: thinking on, and the turn a tool loop continues
      // does not start with its signed thinking block), else the model's side of the task.
      upstream.rule((rec) => {
        const refusal = vendorRefusal(rec, { strict: true, thinkingHistory: true });
        if (refusal) return refusal;
        if (!Array.isArray(rec.body?.tools) || rec.body.tools.length === 0) return scriptedReply(dialect, { text: "ok" })(rec);
        const results = JSON.stringify(rec.body.messages).includes(vendor === "openai" ? '"role":"tool"' : '"tool_result"');
        if (results) return scripted(dialect, { reasoning: "Both are read.", text: ANSWER });
        return scripted(dialect, {
          reasoning: "Read both files at once.", text: "Reading both.",
          calls: [
            { id: id(1), name: "Read", arguments: JSON.stringify({ file_path: join(work, "a.txt") }) },
            { id: id(2), name: "Read", arguments: JSON.stringify({ file_path: join(work, "pic.png") }) },
          ],
        });
      });
      const run = await runClaude(model, work, home, { prompt: "Read a.txt and pic.png", tools: "Read" });
      expect(run.exitCode, `${run.stdout}\n${run.stderr}`).toBe(0);
      expect(JSON.parse(run.stdout)).toMatchObject({ type: "result", subtype: "success", is_error: false, result: ANSWER });

      const calls = upstream.requests.filter((r) => r.path === (vendor === "openai" ? "/v1/chat/completions" : "/v1/messages"));
      expect(calls).toHaveLength(2);
      const second = calls[1]!;
      if (vendor === "anthropic") {
        // Claude Code's betas reach Anthropic (interleaved thinking: thinking between tool calls).
        expect(second.headers["anthropic-beta"]).toContain("interleaved-thinking-2025-05-14");
        expect(second.body.thinking.type).toBe("enabled");
        const [assistant, results] = second.body.messages.slice(-2);
        expect(assistant.content.map((b: any) => b.type)).toEqual(["thinking", "text", "tool_use", "tool_use"]);
        expect(assistant.content[0]).toMatchObject({ thinking: "Read both files at once.", signature: SCRIPTED_SIGNATURE });
        // Both results in the one user turn, in the order Claude Code's reads finished.
        expect(results.content.map((b: any) => [b.type, b.tool_use_id]).sort()).toEqual([["tool_result", id(1)], ["tool_result", id(2)]]);
        const result = (n: number) => results.content.find((b: any) => b.tool_use_id === id(n));
        expect(JSON.stringify(result(1).content)).toContain("alpha");
        // The PNG Claude Code read: the gateway passes text only, so the model is told it was left out.
        expect(result(2).content).toContainEqual({ type: "text", text: MEDIA_LEFT_OUT });
        expect(second.rawBody).not.toContain('"type":"image"');
      } else {
        const tail = second.body.messages.slice(-3);
        expect(tail[0].tool_calls.map((c: any) => c.id)).toEqual([id(1), id(2)]);
        expect(tail.slice(1).map((m: any) => [m.role, m.tool_call_id]).sort()).toEqual([["tool", id(1)], ["tool", id(2)]]);
        const result = (n: number) => tail.find((m: any) => m.tool_call_id === id(n));
        expect(result(1).content).toContain("alpha");
        expect(JSON.stringify(result(2).content)).toContain(MEDIA_LEFT_OUT);
      }
    });
  }, 30_000);

  test("a 402 ends the session at its first request with the gateway's words (x-should-retry: false); a 502 is retried as Claude Code retries, then shown; neither is charged", async () => {
    await inClaudeDirs(async (work, home) => {
      const poor = await gw.app.services.accounts.createAccount("poor", 0);
      const poorKey = (await gw.app.services.accounts.createKey(poor.id, "poor"))!.key;
      const refused = await runClaude("claude-sonnet-4-5", work, home, { prompt: "hi", key: poorKey });
      expect(refused.exitCode).toBe(1);
      const refusal = JSON.parse(refused.stdout);
      expect(refusal).toMatchObject({ is_error: true, api_error_status: 402 });
      expect(refusal.result).toContain("Insufficient credits");
      expect(refusal.result).toContain("top up the account");
      expect(upstream.requests).toHaveLength(0);

      // Two retries (CLAUDE_CODE_MAX_RETRIES; its default is 10, with waits of seconds).
      upstream.rule(() => ({ kind: "json", status: 500, body: { type: "error", error: { type: "api_error", message: "Internal server error" } } }));
      const before = await gw.balanceMicro();
      const failed = await runClaude("claude-sonnet-4-5", work, home, { prompt: "hi", env: { CLAUDE_CODE_MAX_RETRIES: "2" } });
      expect(failed.exitCode).toBe(1);
      const failure = JSON.parse(failed.stdout);
      expect(failure).toMatchObject({ is_error: true, api_error_status: 502 });
      expect(failure.result).toContain("The upstream provider failed (status 500). Retrying is appropriate.");
      expect(upstream.requests.filter((r) => r.path === "/v1/messages")).toHaveLength(3);
      expect(await gw.balanceMicro()).toBe(before);
    });
  }, 40_000);

  test("a key limited to other models: Claude Code reads the 403 as model access (its `model:` check) and moves to its fallback model, which answers; the refusal is free", async () => {
    // Claude Code 2.1.330 takes a 403 for model access only when its message has `model:` in it
    // (then it moves to --fallback-model, or its own default fallback); any other 403 on a custom
    // base URL ends the run as "Failed to authenticate" (an agents probe, twenty-first session).
    await inClaudeDirs(async (work, home) => {
      const { id, key } = (await gw.app.services.accounts.createKey(gw.accountId, { name: "gpt-4.1 only", models: ["openai/gpt-4.1"] }))!;
      const seen = logLines.length;
      const run = await runClaude("claude-sonnet-4-5", work, home, { prompt: "hi", key, env: { CLAUDE_CODE_MAX_RETRIES: "0" }, args: ["--fallback-model", "openai/gpt-4.1"] });
      expect(run.exitCode, `${run.stdout}\n${run.stderr}`).toBe(0);
      expect(JSON.parse(run.stdout)).toMatchObject({ is_error: false });
      const statuses = logLines.slice(seen).filter((l) => l.message === "request" && l.path === "/v1/messages").map((l) => l.status);
      expect(statuses[0]).toBe(403);
      expect(statuses.at(-1)).toBe(200);
      // Only the fallback model was asked upstream, and only it was charged.
      expect(upstream.requests.filter((r) => r.path === "/v1/messages")).toHaveLength(0);
      await gw.app.services.settled();
      const models = gw.db.query<{ model: string }, [string]>("SELECT DISTINCT model FROM usage_records WHERE key_id = ? AND cost_micro > 0").all(id).map((r) => r.model);
      expect(models).toEqual(["openai/gpt-4.1"]);
    });
  }, 40_000);

  test("a key revoked between two turns of a tool loop: the turn under way finishes and is charged; the next is refused once, and Claude Code says the key is invalid at once", async () => {
    // Claude Code retries a 401 (CLAUDE_CODE_MAX_RETRIES, 10 by default, backing off to 32 s: over
    // two minutes of silence) unless the answer says `x-should-retry: false`, as the gateway's does.
    await inClaudeDirs(async (work, home) => {
      const target = join(work, "hello.txt");
      const { id, key } = (await gw.app.services.accounts.createKey(gw.accountId, "revoked mid-session"))!;
      const script = claudeCodeScript(target, { strict: true });
      // Turn 1 (the Write call) is held open until the key is revoked, then finishes.
      upstream.reply((rec) => {
        const answer = script(rec);
        return answer.kind === "sse" ? { ...answer, chunks: answer.chunks.slice(0, 1), holdOpen: true, afterHold: answer.chunks.slice(1) } : answer;
      });
      upstream.reply(script);
      const seen = logLines.length;
      const running = runClaude("claude-sonnet-4-5", work, home, { key, env: { CLAUDE_CODE_MAX_RETRIES: "2" } });
      await until("turn 1 is under way", 20_000, () => upstream.openStreams() === 1);
      expect((await fetch(`${gw.url}/v1/admin/keys/${id}`, { method: "DELETE", headers: { authorization: `Bearer ${ADMIN}` } })).status).toBe(200);
      upstream.finishHeld();
      const run = await running;
      expect(run.exitCode, `${run.stdout}\n${run.stderr}`).toBe(1);
      const result = JSON.parse(run.stdout);
      expect(result).toMatchObject({ is_error: true, api_error_status: 401, api_error_type: "authentication_error" });
      expect(result.result).toContain("Invalid API key");
      // The answer under way was the model's to finish: its Write ran.
      expect(readFileSync(target, "utf8")).toBe(WRITE_CONTENT);
      const statuses = logLines.slice(seen).filter((l) => l.message === "request" && l.path === "/v1/messages").map((l) => l.status);
      expect(statuses).toEqual([200, 401]);
      expect(upstream.requests.filter((r) => r.path === "/v1/messages")).toHaveLength(1);
      await gw.app.services.settled();
      const charged = gw.db.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM usage_records WHERE key_id = ? AND status = 'ok' AND cost_micro > 0").get(id)!.n;
      expect(charged).toBe(1);
    });
  }, 40_000);
});

describe.skipIf(!available)("Claude Code CLI through the gateway: the answer's first text late (the head waits for it)", () => {
  const ANSWER = "echo printed probe-ok.";
  const PING = 'event: ping\ndata: {"type": "ping"}\n\n';
  const KEEP_ALIVE = ": keep-alive\n\n";
  // Longer than keepalive_ms in all: the head and the opening events leave before the answer begins.
  const fillers = (filler: string) => Array(4).fill(filler);
  const PACE_MS = 150;

  test.each(["anthropic", "responses"] as const)("%s upstream: the model thinks out of sight past keepalive_ms (pings, keep-alives), then calls Bash before any text; the tool runs, the next turn answers, and the bill is the vendor's price to the micro-credit", async (kind) => {
    const bash = JSON.stringify({ command: "echo probe-ok", description: "Print probe-ok" });
    const calls: any[] = [];
    await inClaudeDirs(async (work, home) => {
      upstream.rule((rec) => {
        const refusal = vendorRefusal(rec, { strict: true, thinkingHistory: true });
        if (refusal) return refusal;
        if (!Array.isArray(rec.body?.tools) || rec.body.tools.length === 0) return kind === "anthropic" ? scriptedReply("anthropic", { text: "ok" })(rec) : answerWith({ items: [{ text: "ok" }], usage: USAGE(40, 16) })(rec);
        calls.push(rec.body);
        const results = JSON.stringify(rec.body).includes(kind === "anthropic" ? '"tool_result"' : '"function_call_output"');
        if (kind === "responses") {
          // Reasoning with no summary (out of sight), sealed; then the call, or the answer.
          const items = [{ reasoning: [], encrypted: `gAAAA-sealed-${calls.length}` }, results ? { text: ANSWER } : { call: { name: "Bash", arguments: bash, callId: "call_bash" } }];
          // After response.created, response.in_progress and the reasoning item's start.
          return withWait({ kind: "sse", chunks: responsesFrames({ items, usage: results ? USAGE(2_007, 25, 2_000) : USAGE(2_003, 40) }) }, 3, fillers(KEEP_ALIVE), PACE_MS);
        }
        const usage = results ? { input: 7, cacheRead: 2_000, cacheWrite5m: 120, output: 25 } : { input: 3, cacheWrite5m: 1_500, cacheWrite1h: 500, output: 40 };
        const answer = scripted("anthropic", { reasoning: "Run it.", usage, ...(results ? { text: ANSWER } : { calls: [{ id: "toolu_bash", name: "Bash", arguments: bash }] }) });
        // Thinking shown only as its signature (display "omitted"): nothing of it to read until it is signed.
        const omitted = { ...answer, chunks: (answer as { chunks: string[] }).chunks.filter((c) => !c.includes("thinking_delta")) } as typeof answer;
        return withWait(omitted, 1, fillers(PING), PACE_MS);
      });
      const before = await gw.balanceMicro();
      const run = await runClaude(kind === "anthropic" ? "claude-sonnet-4-5" : "openai/gpt-6.1-sol", work, home, { prompt: "Run echo probe-ok", tools: "Bash" });
      expect(run.exitCode, `${run.stdout}\n${run.stderr}`).toBe(0);
      expect(JSON.parse(run.stdout)).toMatchObject({ type: "result", subtype: "success", is_error: false, result: ANSWER, num_turns: 2 });
      expect(calls).toHaveLength(2);
      // Bash ran, and its output reached the model with what the first turn thought.
      if (kind === "anthropic") {
        const [assistant, results] = calls[1].messages.slice(-2);
        expect(assistant.content[0]).toMatchObject({ type: "thinking", signature: SCRIPTED_SIGNATURE });
        expect(JSON.stringify(results.content.find((b: any) => b.tool_use_id === "toolu_bash").content)).toContain("probe-ok");
      } else {
        const input: any[] = calls[1].input;
        expect(input.find((i) => i.type === "reasoning")).toMatchObject({ encrypted_content: "gAAAA-sealed-1" });
        expect(input.find((i) => i.type === "function_call_output" && i.call_id === "call_bash").output).toContain("probe-ok");
      }
      await gw.app.services.settled();
      // claude-sonnet-4-5 at 3,000 / 15,000 per million (reads 300, writes 3,750 and 6,000); GPT-6.1 Sol at 2,000 / 10,000 (reads 100).
      const billed = kind === "anthropic"
        ? 3 * 3_000 + 1_500 * 3_750 + 500 * 6_000 + 40 * 15_000 + (7 * 3_000 + 2_000 * 300 + 120 * 3_750 + 25 * 15_000)
        : 2_003 * 2_000 + 40 * 10_000 + (7 * 2_000 + 2_000 * 100 + 25 * 10_000);
      expect(before - (await gw.balanceMicro())).toBe(billed);
      const key = (await (await fetch(`${gw.url}/v1/key`, { headers: { authorization: `Bearer ${gw.key}` } })).json()) as { account: { reserved: number } };
      expect(key.account.reserved).toBe(0);
    });
  }, 40_000);
});

/** The JSON objects of a stream-json output, one a line, as they come. */
async function* jsonLines(stream: ReadableStream<Uint8Array>): AsyncGenerator<any> {
  const decoder = new TextDecoder();
  let buffered = "";
  for await (const chunk of stream) {
    buffered += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffered.indexOf("\n")) !== -1) {
      const line = buffered.slice(0, end).trim();
      buffered = buffered.slice(end + 1);
      if (line) yield JSON.parse(line);
    }
  }
}
