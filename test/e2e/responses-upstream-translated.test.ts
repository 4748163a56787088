/**
 * Chat-completions and Anthropic clients on a model served by OpenAI's Responses API
 * (`upstream_api: "responses"`): their requests are translated, their answers written in their
 * own format from the decoded events (never the Responses frames relayed), and an agent's tool
 * loop keeps OpenAI's reasoning across turns where the client's format has a place for it
 * (Anthropic's signed thinking blocks); another vendor is never sent it.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { useGateway, post, sseFrames, chargeOf, ANTHROPIC_MODEL, OPENAI_MODEL } from "../helpers/gateway.ts";
import { answerWith, USAGE, type Script } from "../helpers/responses-wire.ts";

const MODEL = "test/sol-translated";
const upstream = useFakeUpstream();
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  retry: { max_retries: 0 },
  extraModels: [{ id: MODEL, provider: "fake-openai", upstream_model: "gpt-6.1-sol", upstream_api: "responses", category: "text", context_length: 1_050_000, pricing: { input_per_mtok: 2000, output_per_mtok: 10000 } }],
}));

const TOOL_TURN: Script = {
  items: [
    { reasoning: ["**Plan**\n\nRun the tests first."], encrypted: "gAAAAB-enc-turn-1" },
    { call: { name: "Bash", arguments: '{"command":"bun test"}', callId: "call_bash_1" } },
  ],
  usage: USAGE(1200, 340, 1024, 200),
};

const CHAT_TOOLS = [{ type: "function", function: { name: "Bash", description: "Run a command", parameters: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } } }];
const CLAUDE_TOOLS = [{ name: "Bash", description: "Run a command", input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } }];

const dataOf = (text: string) => sseFrames(text).filter((f) => f.data !== "[DONE]").map((f) => JSON.parse(f.data));

describe("chat-completions clients → a Responses upstream", () => {
  test("streamed: tools with reasoning (GPT-6.1 Sol takes them only here), chat chunks written from the events", async () => {
    upstream.reply(answerWith(TOOL_TURN, { split: 11 }));
    const res = await post(gw, "/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "run the tests" }], tools: CHAT_TOOLS, reasoning_effort: "high", stream: true, stream_options: { include_usage: true } });
    expect(res.status).toBe(200);
    const text = await res.text();
    const sent = upstream.requests.at(-1)!;
    expect(sent.path).toBe("/v1/responses");
    expect(sent.body.reasoning).toEqual({ effort: "high", summary: "auto" });
    expect(sent.body.tools).toEqual([{ type: "function", name: "Bash", description: "Run a command", parameters: CHAT_TOOLS[0]!.function.parameters, strict: false }]);
    const chunks = dataOf(text);
    expect(chunks.every((c: any) => c.object === "chat.completion.chunk")).toBe(true);
    const calls = chunks.flatMap((c: any) => c.choices?.[0]?.delta?.tool_calls ?? []);
    expect(calls[0]).toMatchObject({ index: 0, id: "call_bash_1", type: "function", function: { name: "Bash" } });
    expect(calls.map((c: any) => c.function.arguments ?? "").join("")).toBe('{"command":"bun test"}');
    expect(chunks.find((c: any) => c.choices?.[0]?.finish_reason)?.choices[0].finish_reason).toBe("tool_calls");
    expect(chunks.at(-1).usage).toMatchObject({ prompt_tokens: 1200, completion_tokens: 340, prompt_tokens_details: { cached_tokens: 1024 }, completion_tokens_details: { reasoning_tokens: 200 } });
  });

  test("whole: a chat.completion body, not the Responses body relayed", async () => {
    upstream.reply(answerWith(TOOL_TURN));
    const body: any = await (await post(gw, "/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "run the tests" }], tools: CHAT_TOOLS })).json();
    expect(body.object).toBe("chat.completion");
    expect(body.model).toBe(MODEL);
    expect(body.choices[0].finish_reason).toBe("tool_calls");
    expect(body.choices[0].message.tool_calls).toEqual([{ id: "call_bash_1", type: "function", function: { name: "Bash", arguments: '{"command":"bun test"}' } }]);
    expect(body.usage).toMatchObject({ prompt_tokens: 1200, completion_tokens: 340 });
    expect(body).not.toHaveProperty("output");
  });

  test("the tool loop's next turn: the call and its result as items", async () => {
    upstream.reply(answerWith({ items: [{ text: "All green." }] }));
    const res = await post(gw, "/v1/chat/completions", {
      model: MODEL,
      messages: [
        { role: "system", content: "You are an agent." },
        { role: "user", content: "run the tests" },
        { role: "assistant", content: null, tool_calls: [{ id: "call_bash_1", type: "function", function: { name: "Bash", arguments: '{"command":"bun test"}' } }] },
        { role: "tool", tool_call_id: "call_bash_1", content: "12 pass" },
      ],
      tools: CHAT_TOOLS,
    });
    expect(((await res.json()) as any).choices[0].message.content).toBe("All green.");
    const sent = upstream.requests.at(-1)!.body;
    expect(sent.instructions).toBe("You are an agent.");
    expect(sent.input).toEqual([
      { role: "user", content: "run the tests" },
      { type: "function_call", call_id: "call_bash_1", name: "Bash", arguments: '{"command":"bun test"}' },
      { type: "function_call_output", call_id: "call_bash_1", output: "12 pass" },
    ]);
  });
});

describe("Anthropic clients → a Responses upstream", () => {
  /** Claude Code's first turn, streamed: the answer's content blocks as the client assembles them. */
  async function claudeTurn(messages: unknown[], model = MODEL): Promise<{ blocks: any[]; stop: string; usage: any }> {
    const res = await post(gw, "/v1/messages", { model, max_tokens: 32000, system: "You are Claude Code.", thinking: { type: "enabled", budget_tokens: 31999 }, tools: CLAUDE_TOOLS, messages, stream: true });
    expect(res.status).toBe(200);
    const blocks: any[] = [];
    let stop = "";
    let usage: any = {};
    for (const e of dataOf(await res.text())) {
      if (e.type === "content_block_start") blocks[e.index] = { ...e.content_block, json: "" };
      else if (e.type === "content_block_delta") {
        const b = blocks[e.index];
        if (e.delta.type === "thinking_delta") b.thinking += e.delta.thinking;
        else if (e.delta.type === "signature_delta") b.signature = e.delta.signature;
        else if (e.delta.type === "text_delta") b.text += e.delta.text;
        else if (e.delta.type === "input_json_delta") b.json += e.delta.partial_json;
      } else if (e.type === "message_delta") {
        stop = e.delta.stop_reason;
        usage = { ...usage, ...e.usage };
      } else if (e.type === "message_start") usage = e.message.usage;
    }
    for (const b of blocks) {
      if (b.type === "tool_use") b.input = JSON.parse(b.json || "{}");
      delete b.json;
    }
    return { blocks, stop, usage };
  }

  test("Claude Code's thinking becomes an effort; OpenAI's reasoning comes back as a signed thinking block, and goes back upstream on the next turn", async () => {
    upstream.reply(answerWith(TOOL_TURN));
    const first = await claudeTurn([{ role: "user", content: "run the tests" }]);
    const sent = upstream.requests.at(-1)!.body;
    expect(sent).toMatchObject({ instructions: "You are Claude Code.", reasoning: { effort: "high", summary: "auto" }, include: ["reasoning.encrypted_content"], store: false });
    expect(first.stop).toBe("tool_use");
    expect(first.blocks.map((b) => b.type)).toEqual(["thinking", "tool_use"]);
    expect(first.blocks[0].thinking).toBe("**Plan**\n\nRun the tests first.");
    expect(first.blocks[0].signature).toStartWith("swy-openai-rs-1.");
    expect(first.blocks[1]).toMatchObject({ name: "Bash", input: { command: "bun test" } });
    // Anthropic's split: input_tokens is the fresh part, beside the cache reads.
    expect(first.usage).toMatchObject({ input_tokens: 176, cache_read_input_tokens: 1024, output_tokens: 340 });

    upstream.reply(answerWith({ items: [{ reasoning: ["Done."], encrypted: "gAAAAB-enc-turn-2" }, { text: "All green." }] }));
    const toolUse = first.blocks[1];
    const second = await claudeTurn([
      { role: "user", content: "run the tests" },
      { role: "assistant", content: first.blocks },
      { role: "user", content: [{ type: "tool_result", tool_use_id: toolUse.id, content: "12 pass" }] },
    ]);
    expect(second.blocks.at(-1).text).toBe("All green.");
    const input = upstream.requests.at(-1)!.body.input;
    expect(input.map((i: any) => i.type ?? i.role)).toEqual(["user", "reasoning", "function_call", "function_call_output"]);
    expect(input[1]).toEqual({ type: "reasoning", summary: [{ type: "summary_text", text: "**Plan**\n\nRun the tests first." }], encrypted_content: "gAAAAB-enc-turn-1" });
    expect(input[2]).toMatchObject({ name: "Bash", arguments: '{"command":"bun test"}' });
    expect(input[3]).toMatchObject({ call_id: input[2].call_id, output: "12 pass" });
  });

  test("OpenAI's reasoning in a thinking block is never sent to another vendor: not to Anthropic (it would refuse the signature), not to a chat upstream", async () => {
    upstream.reply(answerWith(TOOL_TURN));
    const first = await claudeTurn([{ role: "user", content: "run the tests" }]);
    const history = [
      { role: "user", content: "run the tests" },
      { role: "assistant", content: first.blocks },
      { role: "user", content: [{ type: "tool_result", tool_use_id: first.blocks[1].id, content: "12 pass" }] },
    ];
    for (const model of [ANTHROPIC_MODEL, OPENAI_MODEL]) {
      await claudeTurn(history, model);
      const sent = upstream.requests.at(-1)!;
      expect(sent.rawBody).not.toContain("swy-openai-rs-1.");
      expect(sent.rawBody).not.toContain("gAAAAB-enc-turn-1");
    }
  });

  test("a Responses client's sealed OpenAI reasoning is not sent to another vendor either (Anthropic, a chat upstream)", async () => {
    upstream.reply(answerWith(TOOL_TURN));
    const tools = [{ type: "function", name: "Bash", parameters: CLAUDE_TOOLS[0]!.input_schema }];
    const first: any = await (await post(gw, "/v1/responses", { model: MODEL, input: "run the tests", tools, include: ["reasoning.encrypted_content"], store: false })).json();
    expect(first.output[0].encrypted_content).toStartWith("swy-thinking-1.");
    for (const [model, path] of [[OPENAI_MODEL, "/v1/chat/completions"], [ANTHROPIC_MODEL, "/v1/messages"]]) {
      const input = [{ role: "user", content: "run the tests" }, ...first.output, { type: "function_call_output", call_id: "call_bash_1", output: "12 pass" }];
      const res = await post(gw, "/v1/responses", { model, input, tools, reasoning: { effort: "high" }, store: false });
      expect(res.status).toBe(200);
      const sent = upstream.requests.at(-1)!;
      expect(sent.path).toBe(path);
      expect(sent.rawBody).not.toContain("gAAAAB-enc-turn-1");
      expect(sent.rawBody).not.toContain("swy-openai-rs-1.");
    }
  });
});

describe("Codex's own request (code mode) → a Responses upstream", () => {
  // Recorded from `codex exec` (test/fixtures/codex/): GPT-6 metadata asks `reasoning: {effort: "low", context: "all_turns"}`.
  const recorded = JSON.parse(readFileSync(new URL("../fixtures/codex/code-mode-turn-2.json", import.meta.url), "utf8"));

  test("reasoning.context reaches the Responses upstream as Codex asked it (the earlier turns' reasoning stays in the model's context); no other upstream is sent it", async () => {
    expect(recorded.body.reasoning).toEqual({ effort: "low", context: "all_turns" });
    upstream.reply(answerWith({ items: [{ text: "ok" }], usage: USAGE(900, 10) }));
    const res = await post(gw, "/v1/responses", { ...recorded.body, model: MODEL }, { ...recorded.headers, "content-type": "application/json" });
    expect(res.status).toBe(200);
    await res.text();
    const sent = upstream.requests.at(-1)!;
    expect(sent.path).toBe("/v1/responses");
    expect(sent.body.reasoning).toEqual({ effort: "low", summary: "auto", context: "all_turns" });
    // Chat completions and Anthropic have no such field: not sent (a strict vendor refuses unknown fields).
    for (const [model, path] of [[OPENAI_MODEL, "/v1/chat/completions"], [ANTHROPIC_MODEL, "/v1/messages"]]) {
      const other = await post(gw, "/v1/responses", { ...recorded.body, model }, { ...recorded.headers, "content-type": "application/json" });
      expect(other.status).toBe(200);
      await other.text();
      expect(upstream.requests.at(-1)!.path).toBe(path);
      expect(upstream.requests.at(-1)!.rawBody).not.toContain("all_turns");
    }
  });
});

describe("a one-token check of a Responses model (OpenAI refuses max_output_tokens under 16)", () => {
  // Claude Code checks a model before `/model` switches to it with `max_tokens: 1` ("Hi"), and keeps
  // the old model when that is refused; SDK users and health checks ask 1 too. The vendor's floor
  // is 16: the model is asked for 16, and the answer is held and charged for what it reports.
  const ONE_TOKEN = [
    ["Claude Code's model check (Anthropic)", "/v1/messages", { max_tokens: 1, messages: [{ role: "user", content: [{ type: "text", text: "Hi", cache_control: { type: "ephemeral" } }] }] }],
    ["chat completions", "/v1/chat/completions", { max_tokens: 1, messages: [{ role: "user", content: "Hi" }] }],
    ["the Responses API", "/v1/responses", { max_output_tokens: 1, input: "Hi" }],
  ] as const;

  test.each(ONE_TOKEN)("%s: answered, the upstream asked for 16 tokens, the 16 it reports charged at the model's price", async (_name, path, body) => {
    upstream.reply(answerWith({ items: [{ reasoning: [], encrypted: "gAAAAB-enc-check" }], status: "incomplete", incompleteReason: "max_output_tokens", usage: USAGE(9, 16, 0, 16) }));
    const { micro } = await chargeOf(gw, () => post(gw, path, { model: MODEL, ...body }));
    expect(upstream.requests.at(-1)!.body.max_output_tokens).toBe(16);
    expect(micro).toBe(9 * 2000 + 16 * 10000);
  });

  test("a larger limit goes as it was asked", async () => {
    upstream.reply(answerWith({ items: [{ text: "Hi." }] }));
    expect((await post(gw, "/v1/messages", { model: MODEL, max_tokens: 17, messages: [{ role: "user", content: "Hi" }] })).status).toBe(200);
    expect(upstream.requests.at(-1)!.body.max_output_tokens).toBe(17);
  });
});

/**
 * Chat completions' custom tools (`{type: "custom", custom: {name, format}}`) on upstreams that
 * take only functions: sent as a function taking `{input}` (the grammar told in words), the
 * model's call written back as a custom call with its raw input, and a custom call in the history
 * sent back as a call of `{input}`. They were left out without a word (a probe of the SDKs), and a
 * history holding a custom call was refused (`function` was required).
 */
describe("chat-completions clients' custom tools on upstreams of another format", () => {
  const PATCH = { type: "custom", custom: { name: "apply_patch", description: "Edit files", format: { type: "grammar", grammar: { syntax: "lark", definition: "start: \"*** Begin Patch\"" } } } };
  const INPUT = "*** Begin Patch\n+hello \"world\"\n*** End Patch";
  const HISTORY = [
    { role: "user", content: "add hello" },
    { role: "assistant", content: null, tool_calls: [{ id: "call_p1", type: "custom", custom: { name: "apply_patch", input: "*** Begin Patch" } }] },
    { role: "tool", tool_call_id: "call_p1", content: "Done" },
  ];
  const PATCH_TURN: Script = { items: [{ call: { name: "apply_patch", arguments: JSON.stringify({ input: INPUT }), callId: "call_p2" } }], usage: USAGE(300, 40) };

  test("a Responses upstream: the tool as a function of {input}, the history's custom call as a call of {input}; the answer's call written back as a custom call, whole and streamed", async () => {
    upstream.reply(answerWith(PATCH_TURN));
    const res = await post(gw, "/v1/chat/completions", { model: MODEL, messages: HISTORY, tools: [PATCH], tool_choice: { type: "custom", custom: { name: "apply_patch" } } });
    expect(res.status).toBe(200);
    const sent = upstream.requests.at(-1)!.body;
    expect(sent.tools).toEqual([{ type: "function", name: "apply_patch", description: expect.stringContaining("start: \"*** Begin Patch\""), parameters: { type: "object", properties: { input: { type: "string", description: expect.any(String) } }, required: ["input"], additionalProperties: false }, strict: false }]);
    expect(sent.tools[0].description).toStartWith("Edit files");
    expect(sent.tool_choice).toEqual({ type: "function", name: "apply_patch" });
    expect(sent.input).toContainEqual({ type: "function_call", call_id: "call_p1", name: "apply_patch", arguments: JSON.stringify({ input: "*** Begin Patch" }) });
    expect(sent.input).toContainEqual({ type: "function_call_output", call_id: "call_p1", output: "Done" });
    const body: any = await res.json();
    expect(body.choices[0].message.tool_calls).toEqual([{ id: "call_p2", type: "custom", custom: { name: "apply_patch", input: INPUT } }]);
    expect(body.choices[0].finish_reason).toBe("tool_calls");

    upstream.reply(answerWith(PATCH_TURN, { split: 7 }));
    const streamed = await post(gw, "/v1/chat/completions", { model: MODEL, messages: HISTORY, tools: [PATCH], stream: true });
    const chunks = dataOf(await streamed.text());
    const calls = chunks.flatMap((c: any) => c.choices?.[0]?.delta?.tool_calls ?? []);
    expect(calls).toEqual([{ index: 0, id: "call_p2", type: "custom", custom: { name: "apply_patch", input: INPUT } }]);
    expect(chunks.find((c: any) => c.choices?.[0]?.delta?.role)?.choices[0].delta).toMatchObject({ role: "assistant", content: null });
    expect(chunks.find((c: any) => c.choices?.[0]?.finish_reason)?.choices[0].finish_reason).toBe("tool_calls");
  });

  test("an Anthropic upstream: the tool as a function of {input}, the history's call as a tool_use of {input}; the answer's tool_use written back as a custom call, whole and streamed", async () => {
    const toolUse = { type: "tool_use", id: "toolu_p2", name: "apply_patch", input: { input: INPUT } };
    upstream.reply({ kind: "json", body: { id: "msg_1", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [toolUse], stop_reason: "tool_use", stop_sequence: null, usage: { input_tokens: 300, output_tokens: 40 } } });
    const res = await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: HISTORY, tools: [PATCH] });
    expect(res.status).toBe(200);
    const sent = upstream.requests.at(-1)!.body;
    expect(sent.tools).toEqual([{ name: "apply_patch", description: expect.stringContaining("Edit files"), input_schema: expect.objectContaining({ required: ["input"] }) }]);
    expect(sent.messages[1].content).toContainEqual(expect.objectContaining({ type: "tool_use", name: "apply_patch", input: { input: "*** Begin Patch" } }));
    const body: any = await res.json();
    expect(body.choices[0].message.tool_calls).toEqual([{ id: expect.any(String), type: "custom", custom: { name: "apply_patch", input: INPUT } }]);

    const frames = [
      { type: "message_start", message: { id: "msg_2", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 300, output_tokens: 1 } } },
      { type: "content_block_start", index: 0, content_block: { type: "tool_use", id: "toolu_p3", name: "apply_patch", input: {} } },
      ...[JSON.stringify({ input: INPUT }).slice(0, 12), JSON.stringify({ input: INPUT }).slice(12)].map((partial_json) => ({ type: "content_block_delta", index: 0, delta: { type: "input_json_delta", partial_json } })),
      { type: "content_block_stop", index: 0 },
      { type: "message_delta", delta: { stop_reason: "tool_use", stop_sequence: null }, usage: { output_tokens: 40 } },
      { type: "message_stop" },
    ];
    upstream.reply({ kind: "sse", headers: { "content-type": "text/event-stream" }, chunks: frames.map((f) => `event: ${f.type}\ndata: ${JSON.stringify(f)}\n\n`) });
    const streamed = await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: HISTORY, tools: [PATCH], stream: true });
    const calls = dataOf(await streamed.text()).flatMap((c: any) => c.choices?.[0]?.delta?.tool_calls ?? []);
    expect(calls).toEqual([{ index: 0, id: expect.any(String), type: "custom", custom: { name: "apply_patch", input: INPUT } }]);
  });

  test("an OpenAI chat upstream gets the custom tool and the history's custom call as they came (a history with one is not refused)", async () => {
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: HISTORY, tools: [PATCH] });
    expect(res.status).toBe(200);
    const sent = upstream.requests.at(-1)!.body;
    expect(sent.tools).toEqual([PATCH]);
    expect(sent.messages[1].tool_calls).toEqual(HISTORY[1]!.tool_calls);
    // A call with neither shape is refused in OpenAI's words.
    const broken = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "x" }, { role: "assistant", content: null, tool_calls: [{ id: "call_x", type: "custom" }] }, { role: "tool", tool_call_id: "call_x", content: "ok" }] });
    expect(broken.status).toBe(400);
    expect(((await broken.json()) as any).error.message).toBe("Missing required parameter: 'messages[1].tool_calls[0].custom'.");
  });
});
