/**
 * Images and files an agent CLI puts inside tool results (Claude Code's Read of a PNG, Codex's
 * `view_image`) are left out with a note the model can read, on every path, so the session goes
 * on: refused, the result stayed in the conversation and every later turn was a 400. A user's own
 * image is still refused (the gateway passes text only; docs/decisions.md).
 */
import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, startGateway, useGateway } from "../helpers/gateway.ts";
import { MEDIA_LEFT_OUT } from "../../src/formats/common/content-text.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url }));
const PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
const ANTHROPIC_HEADERS = { "anthropic-version": "2023-06-01" };
const lastBody = () => upstream.requests.at(-1)!.body as any;

/** Claude Code's turn after its Read tool opened a PNG: a tool_result holding an image block beside text. */
const claudeCodeTurn = (model: string) => ({
  model,
  max_tokens: 100,
  messages: [
    { role: "user", content: "What is in shot.png?" },
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_01", name: "Read", input: { file_path: "/repo/shot.png" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_01", content: [{ type: "text", text: "Read image (1x1)" }, { type: "image", source: { type: "base64", media_type: "image/png", data: PNG } }] }] },
  ],
});

describe("images and files inside tool results", () => {
  test("Anthropic client, Anthropic upstream: the image block becomes the note, the text stays, the answer comes", async () => {
    const res = await post(gw, "/v1/messages", claudeCodeTurn(ANTHROPIC_MODEL), ANTHROPIC_HEADERS);
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    const sent = JSON.stringify(lastBody());
    expect(sent).not.toContain(PNG);
    expect(lastBody().messages[2].content[0].content).toEqual([{ type: "text", text: "Read image (1x1)" }, { type: "text", text: MEDIA_LEFT_OUT }]);
  });

  test("Anthropic client, OpenAI upstream (translated): the tool message carries the note", async () => {
    const res = await post(gw, "/v1/messages", { ...claudeCodeTurn(OPENAI_MODEL), stream: true }, ANTHROPIC_HEADERS);
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    const tool = lastBody().messages.find((m: { role: string }) => m.role === "tool");
    expect(tool.content).toContain("Read image (1x1)");
    expect(tool.content).toContain(MEDIA_LEFT_OUT);
  });

  test("OpenAI client: a tool message's image and file parts become the note (same format and translated)", async () => {
    for (const model of [OPENAI_MODEL, ANTHROPIC_MODEL]) {
      const res = await post(gw, "/v1/chat/completions", {
        model,
        messages: [
          { role: "user", content: "look at it" },
          { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "view_image", arguments: "{}" } }] },
          { role: "tool", tool_call_id: "call_1", content: [{ type: "image_url", image_url: { url: `data:image/png;base64,${PNG}` } }, { type: "file", file: { file_data: "JVBERi0=", filename: "a.pdf" } }] },
        ],
      });
      expect([model, res.status]).toEqual([model, 200]);
      await res.arrayBuffer();
      const sent = JSON.stringify(lastBody());
      expect(sent).not.toContain(PNG);
      expect(sent).toContain(MEDIA_LEFT_OUT.replaceAll('"', '\\"'));
    }
  });

  test("Responses API (Codex's view_image): a function_call_output holding an input_image is answered", async () => {
    const res = await post(gw, "/v1/responses", {
      model: OPENAI_MODEL,
      input: [
        { role: "user", content: "look at the screenshot" },
        { type: "function_call", call_id: "call_9", name: "view_image", arguments: '{"path":"/tmp/s.png"}' },
        { type: "function_call_output", call_id: "call_9", output: [{ type: "input_image", image_url: `data:image/png;base64,${PNG}` }] },
      ],
    });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    expect(JSON.stringify(lastBody())).not.toContain(PNG);
    expect(JSON.stringify(lastBody())).toContain("left out");
  });

  test("Claude Code's tool search result (tool_reference blocks), translated for an OpenAI upstream, says which tools it loaded instead of nothing", async () => {
    const res = await post(gw, "/v1/messages", {
      model: OPENAI_MODEL,
      max_tokens: 100,
      messages: [
        { role: "user", content: "list my cron jobs" },
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_02", name: "ToolSearch", input: { query: "cron" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_02", content: [{ type: "tool_reference", tool_name: "CronList" }, { type: "tool_reference", tool_name: "CronCreate" }] }] },
      ],
    }, ANTHROPIC_HEADERS);
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    const tool = lastBody().messages.find((m: { role: string }) => m.role === "tool");
    expect(tool.content).toBe("Tool loaded: CronList\nTool loaded: CronCreate");
  });

  test("count_tokens counts a tool result as it would be sent: the vendor is asked without the image", async () => {
    const res = await post(gw, "/v1/messages/count_tokens", { ...claudeCodeTurn(ANTHROPIC_MODEL), max_tokens: undefined }, ANTHROPIC_HEADERS);
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    const asked = upstream.requests.at(-1)!;
    expect(asked.path).toBe("/v1/messages/count_tokens");
    expect(JSON.stringify(asked.body)).not.toContain(PNG);
    expect(JSON.stringify(asked.body)).toContain("left out");
  });

  test("the hold is for what is sent: a large image left out of a tool result does not hold a window's worth of credits (a review)", async () => {
    const poor = await startGateway({ upstreamUrl: upstream.url, credits: 100 });
    try {
      const big = Buffer.alloc(480_000, 7).toString("base64");
      const turn = claudeCodeTurn(ANTHROPIC_MODEL);
      (turn.messages[2] as any).content[0].content[1].source.data = big;
      const res = await post(poor, "/v1/messages", turn, ANTHROPIC_HEADERS);
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    } finally {
      await poor.stop();
    }
  });

  test("a user's own image is still refused with 400, on both endpoints", async () => {
    const messages = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: PNG } }] }] }, ANTHROPIC_HEADERS);
    expect(messages.status).toBe(400);
    const chat = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: `data:image/png;base64,${PNG}` } }] }] });
    expect(chat.status).toBe(400);
    // A file of the operator's vendor account named by id (the Files API's `container_upload`):
    // refused as a document is, not passed on with the client's `files-api` beta (a hostile-tenant probe).
    const asked = upstream.requests.length;
    const file = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: [{ role: "user", content: [{ type: "text", text: "run it" }, { type: "container_upload", file_id: "file_abc" }] }] }, { ...ANTHROPIC_HEADERS, "anthropic-beta": "files-api-2025-04-14,code-execution-2025-05-22" });
    expect(file.status).toBe(400);
    expect(((await file.json()) as { error: { message: string } }).error.message).toContain('"container_upload" is not supported');
    expect(upstream.requests.length).toBe(asked);
  });
});
