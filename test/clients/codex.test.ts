/**
 * Codex CLI through the gateway. Two parts:
 * - Codex's own requests, recorded from `codex exec` 0.169 (test/fixtures/codex/), replayed
 *   against both upstream kinds: what must survive translation does, what cannot run is dropped.
 * - The CLI itself (`@openai/codex`, a devDependency whose npm package carries the native
 *   binary) driven through a tool-using task: it reads a file with `exec_command`, edits it
 *   with `apply_patch`, and finishes, against both upstream kinds, with the README's model
 *   catalog (direct tools) and without it for GPT-6 names (code mode: the same calls made by
 *   JavaScript in `exec`). The config it runs with is the README's "Use with Codex" section,
 *   taken from the README itself.
 */
import { beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startFakeUpstream, useFakeUpstream, withoutCacheMarks, type Reply } from "../helpers/fake-upstream.ts";
import { fileFixture } from "../helpers/file-fixture.ts";
import { useGateway, post, sseFrames, ANTHROPIC_MODEL, OPENAI_MODEL, type Gateway } from "../helpers/gateway.ts";
import { reasoningDialect, scripted, type Script } from "../helpers/scripted-answers.ts";
import type { Logger } from "../../src/log/log.ts";
import { answerWith, USAGE } from "../helpers/responses-wire.ts";
import { until } from "../helpers/until.ts";
import { defaultConfig } from "../../src/config/defaults.ts";

const upstream = useFakeUpstream();
const logLines: string[] = [];
const capture: Logger = (level, message, fields) => logLines.push(JSON.stringify({ level, message, ...fields }));
/** The README's model, as the built-in catalogue has it, served by the fake OpenAI upstream: Codex knows its name. */
const README_MODEL = "openai/gpt-6-luna";
/** Codex's own default model name (0.171; `gpt-6.1-sol` in 0.169), which it runs in code mode. */
const CODEX_DEFAULT = "gpt-6.2-sol";
/**
 * The names the built-in config answers as Codex's default with only Anthropic's key: here a Claude
 * answers them as the built-in config's Sonnet does, so the live run below follows the built-in aliases.
 */
const CODEX_DEFAULT_ALIASES = defaultConfig({ ANTHROPIC_API_KEY: "sk-ant-x" }).models.find((m) => m.id === "anthropic/claude-sonnet-5-5")!.aliases!.filter((a) => a.startsWith("gpt-"));
const gw = useGateway(() => ({
  upstreamUrl: upstream.url, log: capture, retry: { max_retries: 0 },
  extraModels: [
    { id: README_MODEL, provider: "fake-openai", upstream_model: "gpt-6-luna", category: "text", context_length: 1_050_000, pricing: { input_per_mtok: 100, output_per_mtok: 500 } },
    // GPT-6.1 Sol as the built-in config serves it: through OpenAI's Responses API.
    { id: "test/sol-61", provider: "fake-openai", upstream_model: "gpt-6.1-sol", upstream_api: "responses", category: "text", context_length: 1_050_000, pricing: { input_per_mtok: 2000, output_per_mtok: 10000 } },
    { id: "test/claude-for-codex", aliases: CODEX_DEFAULT_ALIASES, provider: "fake-anthropic", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 200_000, pricing: { input_per_mtok: 3000, output_per_mtok: 15000 } },
  ],
}));

const fixture = (name: string) => JSON.parse(readFileSync(new URL(`../fixtures/codex/${name}`, import.meta.url), "utf8"));
const turns = [fixture("turn-1.json"), fixture("turn-2.json"), fixture("turn-3.json")];
const PATCH = "*** Begin Patch\n*** Update File: hello.txt\n@@\n-hello\n+hello, world\n*** End Patch\n";

/** Sends a recorded Codex request with Codex's own headers, to `model`; returns the parsed stream. */
async function replay(recorded: { headers: Record<string, string>; body: Record<string, unknown> }, model: string) {
  const res = await post(gw, "/v1/responses", { ...recorded.body, model }, { ...recorded.headers, "content-type": "application/json" });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toContain("text/event-stream");
  const events = sseFrames(await res.text()).map((f) => ({ event: f.event, ...JSON.parse(f.data) }));
  for (const e of events) expect(e.event).toBe(e.type);
  expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
  return events;
}

const outputOf = (events: any[]) => events.at(-1)!.response.output as any[];

describe.each([
  ["OpenAI upstream", OPENAI_MODEL, "openai" as const],
  ["Anthropic upstream", ANTHROPIC_MODEL, "anthropic" as const],
])("Codex's recorded requests against an %s", (_name, model, vendor) => {
  test("turn 1: developer prompt as system, function and custom tools, hosted tools dropped; thinking as a reasoning summary and two parallel exec calls come back (on the OpenAI kind, DeepSeek's reasoning_content dialect)", async () => {
    upstream.reply(scripted(reasoningDialect(vendor), {
      reasoning: "Look at the file first.",
      calls: [
        { id: "call_exec_1", name: "exec_command", arguments: '{"cmd":"cat hello.txt"}' },
        { id: "call_exec_2", name: "exec_command", arguments: '{"cmd":"ls"}' },
      ],
    }));
    const events = await replay(turns[0], model);
    expect(events[0].type).toBe("response.created");
    expect(events.at(-1).type).toBe("response.completed");
    // Codex asks for `reasoning.summary: "auto"` and reads the thinking from summary events.
    expect(turns[0].body.reasoning.summary).toBe("auto");
    expect(events.filter((e) => e.type.startsWith("response.reasoning")).map((e) => e.type)).toEqual([
      "response.reasoning_summary_part.added",
      ...Array(3).fill("response.reasoning_summary_text.delta"),
      "response.reasoning_summary_text.done",
      "response.reasoning_summary_part.done",
    ]);
    // Codex asks for `reasoning.encrypted_content`: Anthropic's signed thinking comes sealed there,
    // to be sent back on the next turn (formats/common/carried-thinking.ts); DeepSeek's has no seal.
    expect(turns[0].body.include).toContain("reasoning.encrypted_content");
    expect(outputOf(events)).toEqual([
      {
        id: expect.stringMatching(/^rs_/), type: "reasoning", summary: [{ type: "summary_text", text: "Look at the file first." }],
        ...(vendor === "anthropic" ? { encrypted_content: expect.stringMatching(/^swy-thinking-1\./) } : {}),
      },
      expect.objectContaining({ type: "function_call", name: "exec_command", call_id: "call_exec_1", arguments: '{"cmd":"cat hello.txt"}', status: "completed" }),
      expect.objectContaining({ type: "function_call", name: "exec_command", call_id: "call_exec_2", arguments: '{"cmd":"ls"}', status: "completed" }),
    ]);

    const sent = withoutCacheMarks(upstream.requests.at(-1)!);
    const input = turns[0].body.input as any[];
    const toolNames = (sent.body.tools as any[]).map((t) => t.function?.name ?? t.name);
    expect(toolNames).toEqual(["exec_command", "write_stdin", "request_user_input", "apply_patch", "view_image", "get_goal", "create_goal", "update_goal"]);
    if (vendor === "openai") {
      expect(sent.path).toBe("/v1/chat/completions");
      // The first developer item is the system prompt, in the words every chat upstream knows.
      expect(sent.body.messages[0]).toEqual({ role: "system", content: input[0].content[0].text });
      expect(sent.body.messages.map((m: any) => m.role)).toEqual(["system", "system", "user", "user"]);
      expect(sent.body.prompt_cache_key).toBe(turns[0].body.prompt_cache_key);
      expect(sent.body.parallel_tool_calls).toBe(true);
      // Codex asks every model for reasoning; gpt-4o-mini would refuse the request over it.
      expect(sent.body.reasoning_effort).toBeUndefined();
      expect(sent.body.stream_options).toEqual({ include_usage: true });
      const patchTool = sent.body.tools.find((t: any) => t.function.name === "apply_patch").function;
      expect(patchTool.parameters.required).toEqual(["input"]);
      expect(patchTool.description).toContain("*** Begin Patch");
    } else {
      expect(sent.path).toBe("/v1/messages");
      expect(sent.body.system).toStartWith(input[0].content[0].text);
      expect(sent.body.system).toContain("<skills_instructions>");
      expect(sent.body.messages).toHaveLength(1);
      expect(sent.body.messages[0].role).toBe("user");
    }
    for (const field of ["input", "include", "store", "client_metadata", "reasoning", "tool_search", "web_search"]) expect(sent.body[field]).toBeUndefined();
    expect(logLines.join("\n")).toContain("tool:tool_search");
    expect(logLines.join("\n")).toContain("tool:web_search");
  });

  test("turn 2: reasoning items stay behind, parallel calls become one assistant turn and two results; a text message and an apply_patch call come back", async () => {
    upstream.reply(scripted(vendor, { text: "Now I will patch it.", calls: [{ id: "call_patch_1", name: "apply_patch", arguments: JSON.stringify({ input: PATCH }) }] }));
    const events = await replay(turns[1], model);
    expect(outputOf(events)).toEqual([
      expect.objectContaining({ type: "message", content: [expect.objectContaining({ type: "output_text", text: "Now I will patch it." })] }),
      expect.objectContaining({ type: "custom_tool_call", name: "apply_patch", call_id: "call_patch_1", input: PATCH }),
    ]);
    const types = events.map((e) => e.type);
    expect(types).toContain("response.custom_tool_call_input.done");
    expect(types.at(-1)).toBe("response.completed");

    const sent = withoutCacheMarks(upstream.requests.at(-1)!);
    expect(sent.rawBody).not.toContain("gAAAAA-opaque-vendor-blob");
    const catHello = (turns[1].body.input as any[]).find((i) => i.call_id === "call_exec_1" && i.type === "function_call_output").output;
    if (vendor === "openai") {
      expect(sent.body.messages.slice(4)).toEqual([
        {
          role: "assistant",
          content: null,
          tool_calls: [
            { id: "call_exec_1", type: "function", function: { name: "exec_command", arguments: '{"cmd":"cat hello.txt"}' } },
            { id: "call_exec_2", type: "function", function: { name: "exec_command", arguments: '{"cmd":"ls"}' } },
          ],
        },
        { role: "tool", tool_call_id: "call_exec_1", content: catHello },
        { role: "tool", tool_call_id: "call_exec_2", content: expect.stringContaining("hello.txt") },
      ]);
    } else {
      expect(sent.body.messages.slice(1)).toEqual([
        { role: "assistant", content: [expect.objectContaining({ type: "tool_use", id: "call_exec_1", input: { cmd: "cat hello.txt" } }), expect.objectContaining({ type: "tool_use", id: "call_exec_2", input: { cmd: "ls" } })] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "call_exec_1", content: catHello }, { type: "tool_result", tool_use_id: "call_exec_2", content: expect.stringContaining("hello.txt") }] },
      ]);
    }
  });

  test("turn 3: the apply_patch call goes back as a one-string call with its result; the final answer completes", async () => {
    upstream.reply(scripted(vendor, { text: "Done: hello.txt now says hello, world." }));
    const events = await replay(turns[2], model);
    expect(events.at(-1).type).toBe("response.completed");
    expect(events.at(-1).response.usage).toMatchObject({ input_tokens: 50, output_tokens: 10, total_tokens: 60 });
    expect(outputOf(events)).toEqual([expect.objectContaining({ type: "message", status: "completed", content: [expect.objectContaining({ text: "Done: hello.txt now says hello, world." })] })]);

    const sent = withoutCacheMarks(upstream.requests.at(-1)!);
    if (vendor === "openai") {
      const tail = sent.body.messages.slice(-2);
      expect(tail[0]).toEqual({ role: "assistant", content: "Now I will patch it.", tool_calls: [{ id: "call_patch_1", type: "function", function: { name: "apply_patch", arguments: JSON.stringify({ input: PATCH }) } }] });
      expect(tail[1]).toEqual({ role: "tool", tool_call_id: "call_patch_1", content: expect.stringContaining("Success. Updated the following files") });
    } else {
      const tail = sent.body.messages.slice(-2);
      expect(tail[0]).toEqual({ role: "assistant", content: [{ type: "text", text: "Now I will patch it." }, { type: "tool_use", id: "call_patch_1", name: "apply_patch", input: { input: PATCH } }] });
      expect(tail[1].content).toEqual([{ type: "tool_result", tool_use_id: "call_patch_1", content: expect.stringContaining("Success. Updated the following files") }]);
    }
  });

  test("Codex's fallback tool set (a model it has no metadata for): namespace tools flattened, a namespaced call comes back namespaced", async () => {
    const recorded = fixture("first-turn-fallback-metadata.json");
    upstream.reply(scripted(vendor, { calls: [{ id: "call_a1", name: "multi_agent_v1__close_agent", arguments: "{}" }] }));
    const events = await replay(recorded, model);
    expect(outputOf(events)).toEqual([expect.objectContaining({ type: "function_call", namespace: "multi_agent_v1", name: "close_agent", call_id: "call_a1" })]);
    const sent = withoutCacheMarks(upstream.requests.at(-1)!);
    const names = (sent.body.tools as any[]).map((t) => t.function?.name ?? t.name);
    expect(names).toContain("multi_agent_v1__close_agent");
    expect(names).toContain("exec_command");
    expect(names).not.toContain("web_search");
    for (const name of names) expect(name).toMatch(/^[a-zA-Z0-9_-]{1,64}$/);
  });
});

// Codex's code mode: for a model it knows as GPT-6 (`gpt-6.1-sol`, its default, and any id that
// contains a GPT-6 name) Codex 0.169 uses its own metadata (tool_mode "code_mode_only", Responses
// Lite): no top-level `tools`; an `additional_tools` input item declares `exec` (a free-form tool
// whose input is JavaScript calling Codex's tools: `await tools.apply_patch(...)`) and `wait` in
// the default namespace `functions`, and namespaces of function tools. Recorded from a real run
// (the model's side played by a script): turn 1 reads the file in `exec`, turn 2 patches it, turn 3
// finishes.
const codeModeTurns = [fixture("code-mode-turn-1.json"), fixture("code-mode-turn-2.json"), fixture("code-mode-turn-3.json")];
const EXEC_CAT = 'const r = await tools.exec_command({ cmd: "cat hello.txt" });\ntext(r.output);\n';
const EXEC_PATCH = `const r = await tools.apply_patch(${JSON.stringify(PATCH)});\ntext(r);\n`;
/** The tools Codex declares in code mode, as the upstream gets them. */
const CODE_MODE_TOOLS = [
  "exec", "wait", "request_user_input", "request_user_input_async", "clock__sleep",
  "collaboration__followup_task", "collaboration__interrupt_agent", "collaboration__list_agents", "collaboration__send_message", "collaboration__spawn_agent", "collaboration__wait_agent",
];

describe.each([
  ["OpenAI upstream", OPENAI_MODEL, "openai" as const],
  ["Anthropic upstream", ANTHROPIC_MODEL, "anthropic" as const],
])("Codex's recorded code-mode requests (a GPT-6 name, tools in an additional_tools item) against an %s", (_name, model, vendor) => {
  test("what Codex sends: no top-level tools, one additional_tools item of namespaces", () => {
    const body = codeModeTurns[0].body;
    expect(body.tools).toBeUndefined();
    expect(body.model).toBe("gpt-6.1-sol");
    expect(codeModeTurns[0].headers["x-openai-internal-codex-responses-lite"]).toBe("true");
    const item = body.input[0];
    expect(item).toMatchObject({ type: "additional_tools", role: "developer" });
    expect(item.tools.map((t: any) => `${t.type}:${t.name}`)).toEqual(["namespace:functions", "namespace:clock", "namespace:collaboration"]);
    expect(item.tools[0].tools.map((t: any) => `${t.type}:${t.name}`)).toEqual(["custom:exec", "function:wait", "function:request_user_input", "function:request_user_input_async"]);
    // The nested tools are declared to the model inside exec's description, as TypeScript.
    expect(item.tools[0].tools[0].description).toContain("apply_patch(input: string): Promise<unknown>");
    expect(item.tools[0].tools[0].format).toMatchObject({ type: "grammar", syntax: "lark" });
    // Codex's GPT-6 prompt calls the tool `functions.exec`.
    expect(body.input[1].content[0].text).toContain("functions.exec");
  });

  test("turn 1: the additional_tools item's tools reach the upstream (exec as a one-string function under its own name, namespaces flattened); an exec call comes back as Codex's custom_tool_call", async () => {
    upstream.reply(scripted(vendor, { calls: [{ id: "call_exec_1", name: "exec", arguments: JSON.stringify({ input: EXEC_CAT }) }] }));
    const events = await replay(codeModeTurns[0], model);
    expect(outputOf(events)).toEqual([{ id: expect.stringMatching(/^ctc_/), type: "custom_tool_call", status: "completed", call_id: "call_exec_1", name: "exec", input: EXEC_CAT }]);
    expect(events.map((e) => e.type)).toContain("response.custom_tool_call_input.done");

    const sent = withoutCacheMarks(upstream.requests.at(-1)!);
    const tools = sent.body.tools as any[];
    expect(tools.map((t) => t.function?.name ?? t.name)).toEqual(CODE_MODE_TOOLS);
    const exec = vendor === "openai" ? tools[0].function : tools[0];
    expect(exec.description).toStartWith("Run JavaScript code to orchestrate/compose tool calls");
    expect(exec.description).toContain("lark grammar");
    expect(vendor === "openai" ? exec.parameters.required : exec.input_schema.required).toEqual(["input"]);
    if (vendor === "openai") {
      expect(sent.path).toBe("/v1/chat/completions");
      expect(sent.body.messages.map((m: any) => m.role)).toEqual(["system", "system", "system", "system", "user", "user"]);
      expect(sent.body.parallel_tool_calls).toBe(false);
    } else {
      expect(sent.path).toBe("/v1/messages");
      expect(sent.body.system).toContain("functions.exec");
    }
    expect(sent.rawBody).not.toContain("additional_tools");
    expect(logLines.join("\n")).not.toContain("item:additional_tools");
  });

  test("turn 2: the exec call and its output go back as a one-string call and its result; the patching exec call comes back", async () => {
    upstream.reply(scripted(vendor, { calls: [{ id: "call_exec_2", name: "exec", arguments: JSON.stringify({ input: EXEC_PATCH }) }] }));
    const events = await replay(codeModeTurns[1], model);
    expect(outputOf(events)).toEqual([expect.objectContaining({ type: "custom_tool_call", call_id: "call_exec_2", name: "exec", input: EXEC_PATCH })]);
    const sent = withoutCacheMarks(upstream.requests.at(-1)!);
    expect((sent.body.tools as any[]).map((t) => t.function?.name ?? t.name)).toEqual(CODE_MODE_TOOLS);
    const output = "Script completed\nWall time 0.1 seconds\nOutput:\nhello\n";
    if (vendor === "openai") {
      expect(sent.body.messages.slice(-2)).toEqual([
        { role: "assistant", content: null, tool_calls: [{ id: "call_exec_1", type: "function", function: { name: "exec", arguments: JSON.stringify({ input: EXEC_CAT }) } }] },
        { role: "tool", tool_call_id: "call_exec_1", content: output },
      ]);
    } else {
      expect(sent.body.messages.slice(-2)).toEqual([
        { role: "assistant", content: [{ type: "tool_use", id: "call_exec_1", name: "exec", input: { input: EXEC_CAT } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "call_exec_1", content: output }] },
      ]);
    }
  });

  test("turn 3: both exec calls go back; the final answer completes", async () => {
    upstream.reply(scripted(vendor, { text: "Done: hello.txt now says hello, world." }));
    const events = await replay(codeModeTurns[2], model);
    expect(events.at(-1).type).toBe("response.completed");
    expect(outputOf(events)).toEqual([expect.objectContaining({ type: "message", content: [expect.objectContaining({ text: "Done: hello.txt now says hello, world." })] })]);
    const sent = withoutCacheMarks(upstream.requests.at(-1)!);
    const output = expect.stringMatching(/^Script completed\nWall time [\d.]+ seconds\nOutput:\n\{\}$/);
    if (vendor === "openai") {
      expect(sent.body.messages.slice(-2)).toEqual([
        { role: "assistant", content: null, tool_calls: [{ id: "call_exec_2", type: "function", function: { name: "exec", arguments: JSON.stringify({ input: EXEC_PATCH }) } }] },
        { role: "tool", tool_call_id: "call_exec_2", content: output },
      ]);
    } else {
      expect(sent.body.messages.slice(-2)).toEqual([
        { role: "assistant", content: [{ type: "tool_use", id: "call_exec_2", name: "exec", input: { input: EXEC_PATCH } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "call_exec_2", content: output }] },
      ]);
    }
  });
});

// ------------------------------------------------------------------------------------------
// The CLI itself
// ------------------------------------------------------------------------------------------

const CODEX_JS = new URL("../../node_modules/@openai/codex/bin/codex.js", import.meta.url).pathname;
let codexVersion: string | undefined;

// The CLI's first start loads a ~400 MB native binary: on a cold page cache (a fresh install in
// CI) that alone took more than the default 5 s hook timeout once.
beforeAll(() => {
  if (!existsSync(CODEX_JS)) return;
  const run = Bun.spawnSync([process.execPath, CODEX_JS, "--version"], { env: { PATH: process.env.PATH ?? "/usr/bin:/bin" }, timeout: 50_000 });
  if (run.exitCode === 0) codexVersion = run.stdout.toString().trim();
}, 60_000);

/** The README's `Use with Codex` blocks: config.toml and the model catalog, as a user copies them. */
function readmeCodexConfig(): { configToml: string; catalogJson: string } {
  const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
  const section = readme.slice(readme.indexOf("## Use with Codex"));
  const block = (lang: string) => {
    const match = section.match(new RegExp("```" + lang + "\\n([\\s\\S]*?)```"));
    if (!match) throw new Error(`README's "Use with Codex" section has no ${lang} block`);
    return match[1]!;
  };
  return { configToml: block("toml"), catalogJson: block("json") };
}

describe("README: Use with Codex, against the built-in catalogue", () => {
  test("its model is a built-in OpenAI model; Codex's default name is answered; the catalog is optional and names a built-in model", async () => {
    const { configToml, catalogJson } = readmeCodexConfig();
    const model = configToml.match(/^model = "([^"]+)"/m)![1]!;
    const { loadSettings } = await import("../../src/config/load-config.ts");
    const { createCatalogue } = await import("../../src/catalogue/catalogue.ts");
    const both = loadSettings({ OPENAI_API_KEY: "sk-x", ANTHROPIC_API_KEY: "sk-ant-x" }, tmpdir()).models;
    expect(both.find((m) => m.id === model)).toMatchObject({ provider: "openai", category: "text" });
    // Without `model` Codex asks for its default, which the built-in config answers (README: "Without `model`").
    expect(createCatalogue(loadSettings({ OPENAI_API_KEY: "sk-x" }, tmpdir()).models).get(CODEX_DEFAULT)?.id).toBe("openai/gpt-6.1-sol");
    expect(createCatalogue(loadSettings({ ANTHROPIC_API_KEY: "sk-ant-x" }, tmpdir()).models).get(CODEX_DEFAULT)?.id).toBe("anthropic/claude-sonnet-5-5");
    // Codex's code mode (GPT-6 names) reaches the upstream with its tools: the catalog is for ids Codex does not know.
    expect(configToml).toMatch(/^# model_catalog_json = "\/[^"]+" +# optional/m);
    const entry = JSON.parse(catalogJson).models[0];
    expect(both.find((m) => m.id === entry.slug)).toMatchObject({ provider: "anthropic", category: "text" });
    expect(entry).toMatchObject({ apply_patch_tool_type: "freeform", supports_search_tool: false });
  });
});

/** `codex exec` with the README's config (no catalog) for `model` and `key` against `on`'s gateway; its output, exit code and the statuses the gateway answered it (read from `on.lines`, its log). */
async function codexExec(on: { gw: Gateway; lines: string[] }, model: string, key: string, prompt: string) {
  const root = mkdtempSync(join(tmpdir(), "switchyard-codex-"));
  const seen = on.lines.length;
  try {
    const home = join(root, "codex-home");
    const work = join(root, "work");
    mkdirSync(home);
    mkdirSync(work);
    const { configToml } = readmeCodexConfig();
    writeFileSync(join(home, "config.toml"), "check_for_update_on_startup = false\n" + configToml
      .replace(/^model = "[^"]*".*\n/m, `model = "${model}"\n`)
      .replaceAll("http://localhost:8080/v1", `${on.gw.url}/v1`)
      .replace(/^# model_catalog_json = .*$/m, "") + '\n[analytics]\nenabled = false\n[features]\nplugins = false\n');
    const { stdout, stderr, code } = await spawnCodex(["--color", "never", prompt], work, { HOME: root, CODEX_HOME: home, SWITCHYARD_KEY: key });
    const statuses = on.lines.slice(seen).map((l) => JSON.parse(l)).filter((l) => l.message === "request" && l.path === "/v1/responses").map((l) => l.status as number);
    return { stdout, stderr, code, statuses };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

/**
 * The 402 test's Codex waits out its own backoff (200 ms doubling, five reconnects: ~7 s of idle
 * time). It runs against a gateway and upstream of its own, so it is started while the live tasks
 * below run and its test only awaits it: nothing it asserts is shared with them (its log, its
 * upstream's requests, its account). The upstream is never reset between tests, so a request that
 * reached it at any time is still counted.
 */
const refusalUpstream = fileFixture("the refusal run's upstream", () => startFakeUpstream(), (u) => u.stop());
const refusalLines: string[] = [];
const refusalGw = useGateway(() => ({ upstreamUrl: refusalUpstream.url, log: (level, message, fields) => refusalLines.push(JSON.stringify({ level, message, ...fields })), retry: { max_retries: 0 } }));
let refusedRun: Promise<{ run: Awaited<ReturnType<typeof codexExec>>; accountId: string } | { error: unknown }> | undefined;
/** Starts the 402 run once (caught now, rethrown by its test). */
function refusalRun() {
  refusedRun ??= (async () => {
    const poor = await refusalGw.app.services.accounts.createAccount("poor", 0);
    const poorKey = (await refusalGw.app.services.accounts.createKey(poor.id, "poor"))!.key;
    return { run: await codexExec({ gw: refusalGw, lines: refusalLines }, OPENAI_MODEL, poorKey, "say hi"), accountId: poor.id };
  })().catch((error: unknown) => ({ error }));
  return refusedRun;
}

describe("Codex CLI, live", () => {
  // Started here, awaited by "a 402: asked six times" below (which starts it itself when run alone).
  beforeAll(() => {
    if (codexVersion) void refusalRun();
  });

  // A devDependency: `bun install` puts it here, so a missing or broken CLI is a failure, not a skip.
  test("the CLI is installed from npm (devDependency @openai/codex) and runs here", () => {
    expect(existsSync(CODEX_JS)).toBe(true);
    expect(codexVersion).toMatch(/^codex-cli \d+\.\d+\.\d+/);
  });

  test.each([
    ["OpenAI upstream, with the README's catalog", OPENAI_MODEL, "openai" as const, "catalog" as const],
    ["Anthropic upstream, with the README's catalog", ANTHROPIC_MODEL, "anthropic" as const, "catalog" as const],
    // A GPT-6 name Codex has metadata of its own for (code mode): the catalog's entry wins.
    ["OpenAI upstream, the README's own GPT-6 id with the README's catalog", README_MODEL, "openai" as const, "catalog" as const],
    // Without a catalog Codex runs a GPT-6 name in code mode: its tools in an additional_tools item,
    // the model's JavaScript in `exec` calls exec_command and apply_patch.
    ["OpenAI upstream, the README's own GPT-6 id without a catalog (code mode)", README_MODEL, "openai" as const, "code mode" as const],
    ["Anthropic upstream, Codex's default model name without a catalog (code mode)", CODEX_DEFAULT, "anthropic" as const, "code mode" as const],
  ])("codex exec edits a file with exec_command and apply_patch through the gateway, %s (thinking on the OpenAI kind in DeepSeek's reasoning_content dialect)", async (_name, model, vendor, mode) => {
    if (!codexVersion) throw new Error(`codex --version failed: the CLI at ${CODEX_JS} does not run`);
    const codeMode = mode === "code mode";
    const root = mkdtempSync(join(tmpdir(), "switchyard-codex-"));
    try {
      const home = join(root, "codex-home");
      const work = join(root, "work");
      mkdirSync(home);
      mkdirSync(work);
      writeFileSync(join(work, "hello.txt"), "hello\n");
      Bun.spawnSync(["git", "init", "-q"], { cwd: work });

      const { configToml, catalogJson } = readmeCodexConfig();
      const catalogPath = join(home, "switchyard-models.json");
      const catalog = JSON.parse(catalogJson);
      Object.assign(catalog.models[0], { slug: model, display_name: model });
      writeFileSync(catalogPath, JSON.stringify(catalog));
      writeFileSync(
        join(home, "config.toml"),
        // Test hygiene, not needed by users: no update check (a top-level key: appended after the
        // provider's table, Codex took it as the provider's and ignored it with a warning).
        "check_for_update_on_startup = false\n" +
        configToml
          // Codex's default name: no `model` line at all.
          .replace(/^model = "[^"]*".*\n/m, model === CODEX_DEFAULT ? "" : `model = "${model}"\n`)
          .replaceAll("http://localhost:8080/v1", `${gw.url}/v1`)
          // The catalog line, commented out in the README: taken in for the runs with a catalog.
          .replace(/^# model_catalog_json = "[^"]*".*$/m, codeMode ? "" : `model_catalog_json = "${catalogPath}"`) +
          // Test hygiene too: no analytics, no plugin sync.
          '\n[analytics]\nenabled = false\n[features]\nplugins = false\n',
      );

      // The model's side of the task, one scripted answer per turn, in the upstream's wire format.
      // In code mode the same two tool calls are JavaScript for `exec` (a free-form tool: one string).
      const plan: Script[] = [
        // Thinking first: Codex asks for it as a summary (`reasoning.summary: "auto"`) and must take the summary events.
        {
          reasoning: "The file has to be read before it is patched.", text: "Reading the file.",
          calls: [codeMode ? { id: "call_cat", name: "exec", arguments: JSON.stringify({ input: EXEC_CAT }) } : { id: "call_cat", name: "exec_command", arguments: JSON.stringify({ cmd: "cat hello.txt" }) }],
        },
        { calls: [{ id: "call_patch", name: codeMode ? "exec" : "apply_patch", arguments: JSON.stringify({ input: codeMode ? EXEC_PATCH : PATCH }) }] },
        { text: "Done: hello.txt now says hello, world." },
      ];
      for (const step of plan) upstream.reply(scripted(reasoningDialect(vendor), step));

      const { stdout, stderr, code } = await spawnCodex(["--sandbox", "workspace-write", "--color", "never", "Append ', world' to the line in hello.txt"], work, { HOME: root, CODEX_HOME: home, SWITCHYARD_KEY: gw.key });
      if (code !== 0) throw new Error(`codex exec exited ${code}\nstdout:\n${stdout}\nstderr:\n${stderr}`);

      expect(readFileSync(join(work, "hello.txt"), "utf8")).toBe("hello, world\n");
      expect(stdout).toContain("Done: hello.txt now says hello, world.");
      // Codex showed the thinking it read from the reasoning summary events (its progress goes to
      // stderr). Its own GPT-6 metadata asks for no summaries ("reasoning summaries: none").
      if (!codeMode) expect(stderr).toContain("The file has to be read before it is patched.");
      const calls = upstream.requests.filter((r) => r.method === "POST");
      expect(calls).toHaveLength(3);
      // What Codex's tools returned reached the model on the next turns, in the upstream's words.
      const second = JSON.stringify(calls[1]!.body);
      const third = JSON.stringify(calls[2]!.body);
      expect(second).toContain("call_cat");
      // exec_command's output (`cat hello.txt`), as Codex reported it to the model.
      expect(second.slice(second.indexOf("Output:"))).toContain("\\nhello\\n");
      expect(third).toContain("call_patch");
      // apply_patch's answer: direct, its report; inside exec, what the script made of its result.
      expect(third).toContain(codeMode ? "Script completed" : "Success. Updated the following files");
      for (const call of calls) {
        const names = ((call.body as { tools?: any[] }).tools ?? []).map((t) => t.function?.name ?? t.name);
        // Codex 0.171 offers its default model one more tool in code mode (its metadata's experimental tools).
        if (codeMode) expect(names).toEqual(model === CODEX_DEFAULT ? [...CODE_MODE_TOOLS.slice(0, 4), "send_message_to_user_async", ...CODE_MODE_TOOLS.slice(4)] : CODE_MODE_TOOLS);
        else expect(names).toContain("exec_command");
      }
      // GPT-6 Luna takes function tools on chat completions only without reasoning.
      if (model === README_MODEL) for (const call of calls) expect((call.body as { reasoning_effort?: string }).reasoning_effort).toBe("none");
      await gw.app.services.settled();
      const records = gw.db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM usage_records WHERE status = 'ok'").get()!;
      expect(records.n).toBeGreaterThanOrEqual(3);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  }, 90_000);
});

describe("Codex's code mode against GPT-6.1 Sol through OpenAI's Responses API (the built-in config's answer to Codex's default name)", () => {
  test("the additional_tools item's tools reach the Responses upstream as function tools, the model reasons on the tool turn, and its exec call comes back as Codex's custom_tool_call", async () => {
    upstream.reply(answerWith({
      items: [
        { reasoning: ["Read the file first."], encrypted: "gAAAAB-sol-61" },
        { call: { name: "exec", arguments: JSON.stringify({ input: EXEC_CAT }), callId: "call_exec_r1" } },
      ],
      usage: USAGE(900, 60, 0, 20),
    }));
    const events = await replay(codeModeTurns[0], "test/sol-61");
    expect(outputOf(events).filter((i) => i.type !== "reasoning")).toEqual([{ id: expect.stringMatching(/^ctc_/), type: "custom_tool_call", status: "completed", call_id: "call_exec_r1", name: "exec", input: EXEC_CAT }]);
    const sent = upstream.requests.at(-1)!;
    expect(sent.path).toBe("/v1/responses");
    expect(sent.body).toMatchObject({ model: "gpt-6.1-sol", store: false });
    // Reasoning stays on for the tool turn here (no reasoning_effort "none", which GPT-6.1 Sol refuses).
    expect((sent.body.reasoning as { effort?: string } | undefined)?.effort).not.toBe("none");
    expect((sent.body.tools as any[]).map((t) => t.name)).toEqual(CODE_MODE_TOOLS);
    expect(sent.rawBody).not.toContain("additional_tools");
  });
});

describe("Codex CLI, live: what it does with the gateway's refusals", () => {
  // Codex 0.169 classifies an HTTP error by its status alone: 400 is the request's fault, a 429
  // waits (its Retry-After) and tries again, a 429 `insufficient_quota` or `usage_limit_reached`
  // stops at once; any other status is a dropped stream, tried again five times ("Reconnecting…
  // 5/5"), whatever its body or headers say (x-should-retry included). The spec fixes 402 for an
  // account out of credit, so Codex asks six times (each refused for free, ~7 s) before it shows
  // the gateway's words. Pinned so a Codex that stops earlier, or a change to the refusal, is seen.
  test("a 402: asked six times (Codex's five reconnects), never sent upstream, never charged; Codex shows the gateway's words and its request id", async () => {
    if (!codexVersion) throw new Error(`codex --version failed: the CLI at ${CODEX_JS} does not run`);
    const started = await refusalRun();
    if ("error" in started) throw started.error;
    const { run, accountId } = started;
    expect(run.code).toBe(1);
    expect(run.statuses).toEqual([402, 402, 402, 402, 402, 402]);
    expect(run.stderr).toContain("Reconnecting... 5/5");
    expect(run.stderr).toMatch(/unexpected status 402 Payment Required: Insufficient credits: .* top up the account\., url: http:\/\/127\.0\.0\.1:\d+\/v1\/responses, request id: [\w-]+/);
    expect(refusalUpstream.requests).toHaveLength(0);
    await refusalGw.app.services.settled();
    expect(refusalGw.db.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM usage_records WHERE account_id = ? AND cost_micro > 0").get(accountId)!.n).toBe(0);
  }, 60_000);

  test("an upstream that fails every call (a 502 each, free): with the README's config Codex asks six times, not thirty; each is one upstream call, nothing charged", async () => {
    if (!codexVersion) throw new Error(`codex --version failed: the CLI at ${CODEX_JS} does not run`);
    // Codex retries a 5xx in its transport (request_max_retries, 4 by default) inside each of its
    // six stream attempts: 30 requests for one turn without the README's `request_max_retries = 0`,
    // each of them the gateway's own retries and fallbacks already spent (docs/decisions.md).
    const sent = upstream.requests.length;
    const balance = await gw.balanceMicro();
    upstream.rule(() => ({ kind: "json", status: 503, body: { error: { message: "The server is overloaded.", type: "server_error", code: null, param: null } } }));
    try {
      const run = await codexExec({ gw, lines: logLines }, OPENAI_MODEL, gw.key, "say hi");
      expect(run.code).toBe(1);
      expect(run.statuses).toEqual([502, 502, 502, 502, 502, 502]);
      expect(upstream.requests.length - sent).toBe(6);
    } finally {
      upstream.rule(undefined);
    }
    await gw.app.services.settled();
    expect(await gw.balanceMicro()).toBe(balance);
  }, 60_000);

  test("the key's concurrency limit (429, retry-after: 1): Codex waits as told, and its task finishes once the slot is free", async () => {
    if (!codexVersion) throw new Error(`codex --version failed: the CLI at ${CODEX_JS} does not run`);
    // One request at a time for this key, and one under way, held by the upstream: Codex's first
    // request is refused (a token bucket refills while Codex starts, so that refusal was a race).
    const limited = (await gw.app.services.accounts.createKey(gw.accountId, { name: "one at a time", maxConcurrentRequests: 1 }))!.key;
    const answer = scripted("openai", { text: "Held." }) as Extract<Reply, { kind: "sse" }>;
    upstream.reply({ ...answer, chunks: answer.chunks.slice(0, 1), holdOpen: true, afterHold: answer.chunks.slice(1) });
    upstream.reply(scripted("openai", { text: "Hi there." }));
    const held = post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hold" }], stream: true }, { authorization: `Bearer ${limited}` });
    await until("the held request is under way", 10_000, () => upstream.openStreams() === 1);
    const seen = logLines.length;
    const release = until("Codex's request is refused", 30_000, () => logLines.slice(seen).some((l) => l.includes('"path":"/v1/responses"') && l.includes('"status":429')), 20).then(() => upstream.finishHeld());
    const run = await codexExec({ gw, lines: logLines }, OPENAI_MODEL, limited, "say hi");
    await release;
    // The held answer finished too, once let go.
    expect(await (await held).text()).toEndWith("data: [DONE]\n\n");
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain("Hi there.");
    expect(run.statuses).toEqual([429, 200]);
  }, 60_000);
});

/** `codex exec` in `cwd` with only these variables (and PATH), killed after 60 s. */
async function spawnCodex(args: string[], cwd: string, env: Record<string, string>): Promise<{ stdout: string; stderr: string; code: number }> {
  const proc = Bun.spawn([process.execPath, CODEX_JS, "exec", "--skip-git-repo-check", ...args], {
    cwd,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...env },
    stdin: Bun.file("/dev/null"),
    stdout: "pipe",
    stderr: "pipe",
  });
  const timer = setTimeout(() => proc.kill(), 60_000);
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  clearTimeout(timer);
  return { stdout, stderr, code };
}
