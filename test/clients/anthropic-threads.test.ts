/**
 * The Anthropic SDK's message threads (`message-threads` beta: after its first turn a thread sends
 * only the new messages and `thread: {type: "continue", previous_message_id}`). The gateway keeps
 * no threads, so it refuses them as the vendor refuses a request it cannot thread
 * (`thread_unsupported_request`), and the SDK sends the whole conversation instead: its tool
 * runner by itself, a thread when it allows `unsupportedRequestBehavior: "continue_unthreaded"`.
 * Dropped, a continuation reached the model without its history (an SDK probe, 2026-11-30).
 */
import { beforeAll, describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { betaZodTool } from "@anthropic-ai/sdk/helpers/beta/zod";
import { z } from "zod";
import { useFakeUpstream, vendorRefusal, type RecordedRequest, type Reply } from "../helpers/fake-upstream.ts";
import { useGateway, ANTHROPIC_MODEL, OPENAI_MODEL } from "../helpers/gateway.ts";
import { scriptedReply } from "../helpers/scripted-answers.ts";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url }));
let anthropic: Anthropic;
beforeAll(() => {
  anthropic = new Anthropic({ baseURL: gw.url, apiKey: gw.key, maxRetries: 0 });
});
const chats = () => upstream.requests.filter((r) => r.method === "POST" && !r.path.endsWith("/count_tokens"));

describe("Anthropic message threads through the gateway", () => {
  for (const model of [OPENAI_MODEL, ANTHROPIC_MODEL]) {
    test(`${model}: a thread that allows it continues unthreaded, every turn carrying the whole conversation`, async () => {
      const thread = anthropic.beta.messages.thread({ model, max_tokens: 100, system: "You remember names.", unsupportedRequestBehavior: "continue_unthreaded" });
      await thread.send({ role: "user", content: "My name is Zed." });
      await thread.send({ role: "user", content: "What is my name?" });
      const last = chats().at(-1)!.body;
      expect(last.thread).toBeUndefined();
      expect(JSON.stringify(last)).toContain("My name is Zed.");
      expect(JSON.stringify(last)).toContain("You remember names.");
      expect(JSON.stringify(last)).toContain("What is my name?");
    });

    test(`${model}: the tool runner's second turn carries the call and its result (an OpenAI upstream refused a lone tool message)`, async () => {
      const kind = model === OPENAI_MODEL ? "openai" : "anthropic";
      const first = scriptedReply(kind, { calls: [{ id: "toolu_add1", name: "add", arguments: '{"a":2,"b":3}' }] });
      const second = scriptedReply(kind, { text: "5" });
      // One queued answer per upstream request: the call, then the answer to its result.
      upstream.reply((rec: RecordedRequest): Reply => vendorRefusal(rec) ?? first(rec));
      upstream.reply((rec: RecordedRequest): Reply => vendorRefusal(rec) ?? second(rec));
      const add = betaZodTool({ name: "add", description: "adds", inputSchema: z.object({ a: z.number(), b: z.number() }), run: async ({ a, b }) => String(a + b) });
      const final = await anthropic.beta.messages.toolRunner({ model, max_tokens: 200, messages: [{ role: "user", content: "2+3?" }], tools: [add] });
      expect(final.content.find((b) => b.type === "text")).toMatchObject({ text: "5" });
      const last = JSON.stringify(chats().at(-1)!.body);
      expect(last).toContain("2+3?");
      expect(last).toContain("toolu_add1");
    });
  }

  test("a thread that does not allow it is told why: 400, error_code thread_unsupported_request", async () => {
    const thread = anthropic.beta.messages.thread({ model: ANTHROPIC_MODEL, max_tokens: 100 });
    const err = await thread.send({ role: "user", content: "hi" }).catch((e) => e);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    expect(err.error.error.details).toEqual({ error_code: "thread_unsupported_request", unsupported: ["thread"] });
    expect(err.message).toContain("does not keep message threads");
  });
});
