/**
 * Agent traffic on a model served through OpenAI's Responses API (`upstream_api: "responses"`,
 * the built-in GPT-6.1 Sol), billed as OpenAI bills it (a bill audit, 2026-11-30, third round):
 * a Codex turn's cached and written prompt and its reasoning, from every client format, streamed
 * and whole; a one-token check streamed; an answer that fails after its head. Prices are the
 * built-in catalogue's (developers.openai.com/api/docs/models/gpt-6.1-sol: $2 input, $0.10 cached
 * input, $2.50 cache writes, $10 output; US$ 1 = 1,000 credits). OpenAI's `input_tokens` includes
 * the cached and written tokens; `output_tokens` includes the reasoning.
 */
import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { chargeOf, leaveAfter, post, useGateway } from "../helpers/gateway.ts";
import { answerWith, frameOf, responsesEvents, responsesFrames, type Script } from "../helpers/responses-wire.ts";
import { defaultConfig } from "../../src/config/defaults.ts";

const upstream = useFakeUpstream();
const SOL = "audit/gpt-6.1-sol";
const builtIn = defaultConfig({ OPENAI_API_KEY: "x" }).models.find((m) => m.id === "openai/gpt-6.1-sol")!;
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  credits: 100_000,
  retry: { max_retries: 0 },
  extraModels: [{ ...builtIn, id: SOL, provider: "fake-openai", aliases: undefined }],
}));

// Too poor for any request here: its 402s say what each request was to be held for.
const poor = useGateway(() => ({ upstreamUrl: upstream.url, credits: 0.0001, extraModels: [{ ...builtIn, id: SOL, provider: "fake-openai", aliases: undefined }] }));

function last(): Record<string, number | string> {
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    return db.query<Record<string, number | string>, []>("SELECT * FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
  } finally {
    db.close();
  }
}

/** A Codex tool turn: 60,000 prompt tokens of which 52,000 read from the cache and 6,000 written to it, 1,500 out of which 1,100 reasoning. */
const CODEX_TURN: Script = {
  items: [
    { reasoning: ["**Plan**\n\nRead the file."], encrypted: "gAAAAB-enc-codex" },
    { call: { name: "shell", arguments: '{"command":["cat","a.ts"]}', callId: "call_1" } },
  ],
  usage: { input_tokens: 60_000, input_tokens_details: { cached_tokens: 52_000, cache_write_tokens: 6_000 }, output_tokens: 1_500, output_tokens_details: { reasoning_tokens: 1_100 }, total_tokens: 61_500 },
};
const CODEX_BILL = 2_000 * 2_000 + 52_000 * 100 + 6_000 * 2_500 + 1_500 * 10_000;

/** About 75,000 tokens by the gateway's estimate: a reported prompt is never taken above what the request could hold. */
const PROMPT = "the conversation so far ".repeat(15_000);
function body(path: string, stream: boolean, extra: Record<string, unknown> = {}) {
  if (path === "/v1/responses") return { model: SOL, input: PROMPT, stream, store: false, prompt_cache_key: "codex-1", ...extra };
  if (path === "/v1/messages") return { model: SOL, max_tokens: 8_000, messages: [{ role: "user", content: PROMPT }], stream, ...extra };
  return { model: SOL, messages: [{ role: "user", content: PROMPT }], stream, ...(stream ? { stream_options: { include_usage: true } } : {}), ...extra };
}
const paths = ["/v1/responses", "/v1/chat/completions", "/v1/messages"];

describe("a Codex turn through every client format on the Responses upstream", () => {
  test("the built-in catalogue prices GPT-6.1 Sol as its model page does", () => {
    expect(builtIn.pricing).toMatchObject({ input_per_mtok: 2_000, output_per_mtok: 10_000, cache_read_per_mtok: 100, cache_write_per_mtok: 2_500 });
  });
  for (const path of paths) {
    for (const stream of [true, false]) {
      test(`${path}, ${stream ? "streamed" : "whole"}: fresh, cached and written input and reasoning inside output, each at its price, counted once`, async () => {
        upstream.reply(answerWith(CODEX_TURN, { split: 13 }));
        const { micro } = await chargeOf(gw, () => post(gw, path, body(path, stream)));
        expect(micro).toBe(CODEX_BILL);
        expect(last()).toMatchObject({ status: "ok", prompt_tokens: 60_000, fresh_input_tokens: 2_000, cache_read_tokens: 52_000, completion_tokens: 1_500, reasoning_tokens: 1_100, estimated: 0 });
      });
    }
  }
});

describe("12-hour cache writes (`prompt_cache_retention: \"12h\"`)", () => {
  // OpenAI's prompt-caching guide: from GPT-5.6 on, 30-minute writes cost 1.25× input and a
  // Responses request's 12-hour writes 2.5× ($5 of GPT-6.1 Sol's $2, as GPT-6.2 Sol's model page
  // prints it). The usage object does not split them; the response echoes the retention it ran at.
  const TWELVE_HOUR_BILL = 2_000 * 2_000 + 52_000 * 100 + 6_000 * 5_000 + 1_500 * 10_000;
  test("the built-in catalogue prices GPT-6.1 Sol's 12-hour writes at $5", () => {
    expect(builtIn.pricing).toMatchObject({ cache_write_per_mtok: 2_500, cache_write_1h_per_mtok: 5_000 });
  });
  for (const path of ["/v1/responses", "/v1/chat/completions"]) {
    for (const stream of [true, false]) {
      test(`${path}, ${stream ? "streamed" : "whole"}: an answer that ran at 12 hours has its writes charged at the 12-hour price`, async () => {
        upstream.reply(answerWith(CODEX_TURN, { split: 13 }));
        const { micro } = await chargeOf(gw, () => post(gw, path, body(path, stream, { prompt_cache_retention: "12h" })));
        expect(upstream.requests.at(-1)!.body.prompt_cache_retention).toBe("12h");
        expect(last()).toMatchObject({ status: "ok", prompt_tokens: 60_000, fresh_input_tokens: 2_000, cache_read_tokens: 52_000, cache_write_5m_tokens: 0, cache_write_1h_tokens: 6_000 });
        expect(micro).toBe(TWELVE_HOUR_BILL);
      });
    }
  }
  test("an answer that echoes the `24h` retention (GPT-5.6 and later echo it unasked) is charged 30-minute writes", async () => {
    upstream.reply(answerWith({ ...CODEX_TURN, promptCacheRetention: "24h" }));
    const { micro } = await chargeOf(gw, () => post(gw, "/v1/responses", body("/v1/responses", true, { prompt_cache_retention: "24h" })));
    expect(last()).toMatchObject({ cache_write_5m_tokens: 6_000, cache_write_1h_tokens: 0 });
    expect(micro).toBe(CODEX_BILL);
  });
  test("a request that asked for 12 hours is held for prompts written at the 12-hour price", async () => {
    // The hold covers every prompt token at the dearest price: at 1.25× the whole turn's writes
    // could cost more than was held, and a charge never goes past its hold.
    const before = await gw.balanceMicro();
    upstream.reply(answerWith({ ...CODEX_TURN, usage: { input_tokens: 60_000, input_tokens_details: { cached_tokens: 0, cache_write_tokens: 60_000 }, output_tokens: 10, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 60_010 } }));
    const res = await post(gw, "/v1/responses", body("/v1/responses", false, { prompt_cache_retention: "12h", max_output_tokens: 16 }));
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    await gw.app.services.settled();
    expect(before - (await gw.balanceMicro())).toBe(60_000 * 5_000 + 10 * 10_000);
  });
});

describe("the hold for 12-hour writes", () => {
  /** The most the request may cost, in micro-credits, from the 402 of a gateway too poor for it. */
  async function held(extra: Record<string, unknown>): Promise<number> {
    const res = await post(poor, "/v1/responses", { ...body("/v1/responses", false, extra), max_output_tokens: 16 });
    expect(res.status).toBe(402);
    const message = ((await res.json()) as { error: { message: string } }).error.message;
    return Math.round(Number(/may cost up to ([\d.]+) credits/.exec(message)![1]) * 1_000_000);
  }
  test("a request that asks for 12 hours is held at their price, any other at the 30-minute writes' (not refused for twice what it can cost)", async () => {
    // Bodies of the same size (the hold's prompt is bounded by the body's bytes).
    const thirtyMinutes = await held({ prompt_cache_retention: "24h" });
    const twelveHours = await held({ prompt_cache_retention: "12h" });
    // Every prompt token at $2.50 (30-minute writes, the dearest it can cost) or $5 (12-hour
    // writes): the 12-hour hold's prompt is twice the other's, and what is left of the other is
    // the answer's few dozen tokens at $10.
    const prompt = twelveHours - thirtyMinutes;
    const answer = thirtyMinutes - prompt;
    expect(prompt).toBeGreaterThan(60_000 * 2_500);
    expect(answer % 10_000).toBe(0);
    expect(answer).toBeGreaterThanOrEqual(16 * 10_000);
    expect(answer).toBeLessThan(100 * 10_000);
    expect(await held({})).toBeLessThan(thirtyMinutes);
  });
});

describe("a one-token check, streamed (the 16-token floor)", () => {
  const CHECK: Script = { items: [{ reasoning: [], encrypted: "gAAAAB-enc-check" }], status: "incomplete", incompleteReason: "max_output_tokens", usage: { input_tokens: 9, input_tokens_details: { cached_tokens: 0 }, output_tokens: 16, output_tokens_details: { reasoning_tokens: 16 }, total_tokens: 25 } };
  const limits: Record<string, Record<string, unknown>> = { "/v1/responses": { max_output_tokens: 1 }, "/v1/chat/completions": { max_tokens: 1 }, "/v1/messages": { max_tokens: 1 } };
  for (const path of paths) {
    test(`${path}: the 16 tokens the vendor reports, not the client's 1`, async () => {
      upstream.reply(answerWith(CHECK));
      const { micro } = await chargeOf(gw, () => post(gw, path, { ...body(path, true), ...limits[path] }));
      expect(upstream.requests.at(-1)!.body.max_output_tokens).toBe(16);
      expect(micro).toBe(9 * 2_000 + 16 * 10_000);
    });
  }
});

describe("an answer that fails after its head, before any of it was made", () => {
  // OpenAI's stream opens with response.created and response.in_progress at once; the client's
  // head waits for the answer's first text (stream-answer.ts), so such a failure is still an
  // attempt that failed before anything reached the client: a 502 in the client's format (or
  // another key, another model), charged nothing.
  const failedFirst = () => responsesEvents({ items: [], status: "failed", error: { code: "server_error", message: "The model failed." }, usage: null }).map((e) => frameOf(e));
  const cutAfterCreated = () => responsesFrames({ items: [{ text: "never" }] }).slice(0, 2);
  for (const path of paths) {
    for (const [name, chunks] of [["response.failed as the first answer event", failedFirst], ["the stream cut after response.created", cutAfterCreated]] as const) {
      test(`${path}: ${name} is a 502 that costs nothing`, async () => {
        upstream.reply({ kind: "sse", chunks: chunks() });
        const before = await gw.balanceMicro();
        const res = await post(gw, path, body(path, true));
        expect(res.status).toBe(502);
        const answer = (await res.json()) as { type?: string; error: { message: string; type: string } };
        expect(answer.error.message).toMatch(/upstream provider/);
        if (path === "/v1/messages") expect(answer.type).toBe("error");
        await gw.app.services.settled();
        expect(await gw.balanceMicro()).toBe(before);
        expect(last()).toMatchObject({ cost_micro: 0 });
        expect(gw.app.services.ledger.openHolds()).toBe(0);
      });
    }
  }
});

describe("a reasoning answer whose client leaves after its text", () => {
  for (const path of paths) {
    test(`${path}: the rest is read, and the vendor's count (reasoning, cached prompt) charged`, async () => {
      const frames = responsesFrames({ items: [{ reasoning: ["thinking"], encrypted: "gAAAAB-enc-left" }, { text: "The answer." + " filler".repeat(40) }], usage: CODEX_TURN.usage });
      upstream.reply({ kind: "sse", delayMs: 10, chunks: frames });
      const before = await gw.balanceMicro();
      const leave = new AbortController();
      const res = await post(gw, path, body(path, true), {}, leave.signal);
      // The text's first piece, in any format (a model streams a few characters a delta).
      await leaveAfter(gw, res, leave, '"The ');
      expect(last()).toMatchObject({ status: "cancelled", prompt_tokens: 60_000, cache_read_tokens: 52_000, completion_tokens: 1_500, reasoning_tokens: 1_100, estimated: 0 });
      expect(before - (await gw.balanceMicro())).toBe(CODEX_BILL);
    });
  }
});
