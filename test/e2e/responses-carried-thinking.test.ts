/**
 * Codex on an Anthropic upstream: the Responses API's `include: ["reasoning.encrypted_content"]`
 * gets Anthropic's signed thinking sealed in each reasoning item, and a tool loop that sends the
 * items back continues with the turn's signed thinking in front (Anthropic wants it back within a
 * tool-use turn; with a thinking budget it refuses the turn without it, and the fake upstream
 * refuses as it does). Before, thinking was dropped after a task's first request (a probe of the
 * agent CLIs). The model here thinks adaptively, which Anthropic takes without the block too
 * ("Adaptive mode relaxes this"): without it the loop still thinks, at the client's effort.
 */
import { describe, expect, test } from "bun:test";
import { useFakeUpstream, vendorRefusal, type RecordedRequest, type Reply } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, post, sseFrames, useGateway } from "../helpers/gateway.ts";
import { anthropicBody, anthropicStream, SCRIPTED_SIGNATURE } from "../helpers/scripted-answers.ts";
import { openThinking, sealThinking } from "../../src/formats/common/carried-thinking.ts";
import { startGateway } from "../helpers/gateway.ts";

const options = { strict: true, thinkingHistory: true };
const upstream = useFakeUpstream(options);
const OPUS = "test/opus";
const GPT5 = "test/gpt-5";
const extraModels = [{ id: GPT5, provider: "fake-openai", upstream_model: "gpt-5.5", category: "text", context_length: 200_000, pricing: { input_per_mtok: 1250, output_per_mtok: 10000 } }, { id: OPUS, provider: "fake-anthropic", upstream_model: "claude-opus-4-6", category: "text", context_length: 200_000, pricing: { input_per_mtok: 3000, output_per_mtok: 15000 } }];
const gw = useGateway(() => ({ upstreamUrl: upstream.url, extraModels, credits: 1000, retry: { max_retries: 0 } }));

function answer(reply: Reply) {
  upstream.reply((rec: RecordedRequest) => vendorRefusal(rec, options) ?? reply);
}
const sent = () => upstream.requests.at(-1)!.body;
const tools = [{ type: "function", name: "shell", description: "run a command", parameters: { type: "object", properties: { cmd: { type: "string" } }, required: ["cmd"] } }];
const first = (include: string[] | undefined, stream: boolean) => ({
  model: OPUS, stream, store: false, tools, reasoning: { effort: "high" }, ...(include ? { include } : {}),
  input: [{ role: "user", content: "list the files" }],
});
const think = "I should run ls.";
const call = { id: "toolu_01", name: "shell", arguments: '{"cmd":"ls"}' };

/** The first turn's output items, streamed or whole. */
async function firstTurn(include: string[] | undefined, stream: boolean): Promise<Record<string, any>[]> {
  answer(stream ? anthropicStream({ reasoning: think, calls: [call] }) : anthropicBody({ reasoning: think, calls: [call] }));
  const res = await post(gw, "/v1/responses", first(include, stream));
  expect(res.status).toBe(200);
  if (!stream) return ((await res.json()) as any).output;
  const done = sseFrames(await res.text()).map((f) => JSON.parse(f.data)).find((e) => e.type === "response.completed");
  return done.response.output;
}

describe("Anthropic's signed thinking through the Responses API", () => {
  for (const stream of [false, true]) {
    test(`${stream ? "streamed" : "whole"}: sealed in the reasoning item when asked; sent back, the next turn starts with the signed block and thinks`, async () => {
      const output = await firstTurn(["reasoning.encrypted_content"], stream);
      const reasoning = output.find((i) => i.type === "reasoning")!;
      expect(typeof reasoning.encrypted_content).toBe("string");
      expect(openThinking(reasoning.encrypted_content)).toEqual([{ type: "thinking", thinking: think, signature: SCRIPTED_SIGNATURE }]);
      const fc = output.find((i) => i.type === "function_call")!;

      // Codex's next request: everything it was given, the tool's output, thinking asked again.
      answer(anthropicBody({ reasoning: "Two files.", text: "a.txt b.txt" }));
      const res = await post(gw, "/v1/responses", {
        ...first(["reasoning.encrypted_content"], false),
        input: [{ role: "user", content: "list the files" }, ...output, { type: "function_call_output", call_id: fc.call_id, output: "a.txt\nb.txt" }],
      });
      expect(res.status).toBe(200);
      const body = sent();
      expect(body.thinking).toBeDefined();
      const assistant = body.messages.find((m: { role: string }) => m.role === "assistant");
      expect(assistant.content[0]).toEqual({ type: "thinking", thinking: think, signature: SCRIPTED_SIGNATURE });
      expect(assistant.content.at(-1)).toMatchObject({ type: "tool_use", name: "shell" });
    });
  }

  test("not asked for: no encrypted_content, and the tool loop goes on without the signed block, thinking adaptively at the client's effort", async () => {
    const output = await firstTurn(undefined, false);
    expect(output.find((i) => i.type === "reasoning")!.encrypted_content).toBeUndefined();
    const fc = output.find((i) => i.type === "function_call")!;
    answer(anthropicBody({ text: "a.txt b.txt" }));
    const res = await post(gw, "/v1/responses", { ...first(undefined, false), input: [{ role: "user", content: "list the files" }, ...output, { type: "function_call_output", call_id: fc.call_id, output: "a.txt" }] });
    expect(res.status).toBe(200);
    expect(sent().thinking).toEqual({ type: "adaptive" });
    expect(sent().output_config).toEqual({ effort: "high" });
    expect(sent().messages.find((m: { role: string }) => m.role === "assistant").content[0].type).toBe("tool_use");
  });

  test("a kept answer keeps its signed thinking for previous_response_id whatever `include` asked (as OpenAI keeps a stored answer's reasoning; a review)", async () => {
    answer(anthropicBody({ reasoning: think, calls: [call] }));
    const res1 = await post(gw, "/v1/responses", { ...first(undefined, false), store: true });
    expect(res1.status).toBe(200);
    const one = (await res1.json()) as { id: string; output: Record<string, any>[] };
    // The client's items are as OpenAI writes them without `include`: the sealed thinking is the kept copy's only.
    expect(one.output.find((i) => i.type === "reasoning")!.encrypted_content).toBeUndefined();
    const fc = one.output.find((i) => i.type === "function_call")!;
    answer(anthropicBody({ text: "a.txt b.txt" }));
    const res2 = await post(gw, "/v1/responses", { model: OPUS, tools, reasoning: { effort: "high" }, previous_response_id: one.id, input: [{ type: "function_call_output", call_id: fc.call_id, output: "a.txt\nb.txt" }] });
    expect(res2.status).toBe(200);
    const body = sent();
    expect(body.thinking).toBeDefined();
    const assistant = body.messages.find((m: { role: string }) => m.role === "assistant");
    expect(assistant.content[0]).toEqual({ type: "thinking", thinking: think, signature: SCRIPTED_SIGNATURE });
  });

  test("another vendor's encrypted content, or a sealed field altered out of shape, is not read: the turn goes on without the signed block", async () => {
    const output = await firstTurn(["reasoning.encrypted_content"], false);
    const fc = output.find((i) => i.type === "function_call")!;
    for (const encrypted of ["gAAAAABopenai-own-opaque", "swy-thinking-1.bm90IGpzb24", "swy-thinking-1." + Buffer.from('[{"type":"thinking","thinking":"x"}]').toString("base64url")]) {
      answer(anthropicBody({ text: "ok" }));
      const items = output.map((i) => (i.type === "reasoning" ? { ...i, encrypted_content: encrypted } : i));
      const res = await post(gw, "/v1/responses", { ...first(["reasoning.encrypted_content"], false), input: [{ role: "user", content: "list" }, ...items, { type: "function_call_output", call_id: fc.call_id, output: "a" }] });
      expect([encrypted, res.status]).toEqual([encrypted, 200]);
      expect(sent().messages.find((m: { role: string }) => m.role === "assistant").content[0].type).toBe("tool_use");
    }
  });
});

describe("carried thinking and the hold", () => {
  test("the blocks sent upstream are held for and capped in the billed prompt like the body (a hostile-tenant probe: 6.4 MB went upstream held as 200 bytes)", async () => {
    const poor = await startGateway({ upstreamUrl: upstream.url, extraModels, credits: 500, retry: { max_retries: 0 } });
    try {
      const sealed = sealThinking([{ type: "thinking", thinking: "x".repeat(600_000), signature: SCRIPTED_SIGNATURE }]);
      const input = [
        { role: "user", content: "go" },
        { type: "reasoning", id: "rs_1", summary: [], encrypted_content: sealed },
        { type: "function_call", call_id: "call_1", name: "shell", arguments: '{"cmd":"ls"}' },
        { type: "function_call_output", call_id: "call_1", output: "a" },
      ];
      // 600,000 bytes of thinking at the dearest input price are far more than 500 credits: refused before anything is sent.
      const sentBefore = upstream.requests.length;
      const res = await post(poor, "/v1/responses", { model: OPUS, tools, input, store: false });
      expect(res.status).toBe(402);
      expect(upstream.requests.length).toBe(sentBefore);
      // The same turn with a small block is answered: the account is not merely too poor.
      answer(anthropicBody({ text: "ok" }));
      const small = input.map((i) => (i.type === "reasoning" ? { ...i, encrypted_content: sealThinking([{ type: "thinking", thinking: "short", signature: SCRIPTED_SIGNATURE }]) } : i));
      expect((await post(poor, "/v1/responses", { model: OPUS, tools, input: small, store: false })).status).toBe(200);
    } finally {
      await poor.stop();
    }
  });

  test("count_tokens refuses a thread as /v1/messages does", async () => {
    const res = await post(gw, "/v1/messages/count_tokens", { model: OPUS, messages: [{ role: "user", content: "hi" }], thread: { type: "continue", previous_message_id: "msg_other" } }, { "anthropic-version": "2023-06-01" });
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error.details.error_code).toBe("thread_unsupported_request");
  });
});

describe("text.verbosity (Codex sends it for the ids it knows)", () => {
  test("passed to a GPT-5 model, left out for the others (OpenAI refuses a value other than the default on them)", async () => {
    for (const [model, kept] of [[GPT5, true], [OPENAI_MODEL, false]] as const) {
      const res = await post(gw, "/v1/responses", { model, input: "hi", text: { verbosity: "low" } });
      expect([model, res.status]).toEqual([model, 200]);
      await res.arrayBuffer();
      expect([model, sent().verbosity]).toEqual([model, kept ? "low" : undefined]);
    }
  });
});
