/**
 * What a translation-fidelity probe found: requests translated for the other vendor that it would
 * refuse, and answers that reached a client in a shape its SDK does not expect. The fake upstream
 * records what the gateway sent; where it would not refuse what the real vendor refuses, the
 * assertion is on the recorded body, with the vendor's rule beside it.
 */
import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, post, useGateway } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, retry: { max_retries: 0 } }));
const sent = () => upstream.requests.at(-1)!.body;
const parameters = { type: "object", properties: { q: { type: "string" } } };

describe("tool_choice none with parallel_tool_calls false → Anthropic", () => {
  // Anthropic's ToolChoiceNone is `{type: "none"}` alone: `disable_parallel_tool_use` exists on
  // auto, any and tool, and is refused beside none. Zed's agent sends exactly this pair.
  test("chat completions", async () => {
    const tools = [{ type: "function", function: { name: "lookup", parameters } }];
    const res = await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, tools, tool_choice: "none", parallel_tool_calls: false, messages: [{ role: "user", content: "hi" }] });
    expect(res.status).toBe(200);
    expect(sent().tool_choice).toEqual({ type: "none" });
  });

  test("the Responses API", async () => {
    const tools = [{ type: "function", name: "lookup", parameters }];
    const res = await post(gw, "/v1/responses", { model: ANTHROPIC_MODEL, store: false, tools, tool_choice: "none", parallel_tool_calls: false, input: "hi" });
    expect(res.status).toBe(200);
    expect(sent().tool_choice).toEqual({ type: "none" });
  });

  test("auto still takes the flag", async () => {
    const tools = [{ type: "function", function: { name: "lookup", parameters } }];
    await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, tools, tool_choice: "auto", parallel_tool_calls: false, messages: [{ role: "user", content: "hi" }] });
    expect(sent().tool_choice).toEqual({ type: "auto", disable_parallel_tool_use: true });
  });
});
