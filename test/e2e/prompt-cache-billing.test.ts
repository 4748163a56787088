/**
 * Prompt caching is billed as the vendors bill it (issue 29): fake upstreams report cache reads
 * and writes (5-minute and 1-hour) in their own wire formats, stream and non-stream; through
 * every client format and both translations the charge is the price book's sum to the
 * micro-credit, the record keeps the classes and the prices, the client sees the vendor's counts
 * in its own format, reports and CSV show the classes and the savings, and the audit recomputes
 * every record (and finds one altered by hand).
 */
import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { runAdmin } from "../../src/cli/admin.ts";
import { useFakeUpstream, vendorRefusal, type RecordedRequest, type Reply } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, OPENAI_MODEL, post, sseFrames, useGateway } from "../helpers/gateway.ts";
import { scriptedReply, type ScriptUsage } from "../helpers/scripted-answers.ts";

const ADMIN = "admin-secret-for-the-prompt-cache-tests-0123";
const upstream = useFakeUpstream();
/** GPT-5.6, configured with its input and output prices only: its cache prices come from the defaults. */
const GPT_56 = "test/gpt-5.6";
/** DeepSeek, with the cache-hit price its operator configured: reads are reported as `prompt_cache_hit_tokens`. */
const DEEPSEEK = "test/deepseek";
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  adminToken: ADMIN,
  credits: 1_000,
  extraModels: [
    { id: GPT_56, provider: "fake-openai", upstream_model: "gpt-5.6-terra", category: "text", context_length: 400_000, owned_by: "openai", pricing: { input_per_mtok: 2_500, output_per_mtok: 15_000 } },
    { id: DEEPSEEK, provider: "fake-openai", upstream_model: "deepseek-v4-flash", category: "text", context_length: 1_000_000, owned_by: "deepseek", pricing: { input_per_mtok: 150, output_per_mtok: 600, cache_read_per_mtok: 3 } },
  ],
}));

function answer(vendor: "openai" | "anthropic", usage: ScriptUsage) {
  const reply = scriptedReply(vendor, { text: "Cached answer.", usage });
  upstream.reply((rec: RecordedRequest): Reply => vendorRefusal(rec) ?? reply(rec));
}

/** The turn: 100 fresh input tokens, 9,000 read from the cache, 500 written (300 for 5 minutes, 200 for an hour), 50 out. */
const ANTHROPIC_TURN: ScriptUsage = { input: 100, cacheRead: 9_000, cacheWrite5m: 300, cacheWrite1h: 200, output: 50 };
/** OpenAI reports reads only (inside prompt_tokens). */
const OPENAI_TURN: ScriptUsage = { input: 100, cacheRead: 9_000, output: 50 };

/**
 * What the vendors' price lists say, worked by hand (credits per million tokens; US$ 1 = 1,000 credits):
 * claude-sonnet-4-5 at 3,000 in / 15,000 out: reads 300 (0.1×), 5-minute writes 3,750 (1.25×), 1-hour writes 6,000 (2×);
 * gpt-4o-mini at 150 / 600: cached input 75 (0.5×).
 */
const EXPECTED = {
  anthropic: { micro: 100 * 3_000 + 9_000 * 300 + 300 * 3_750 + 200 * 6_000 + 50 * 15_000, prompt: 9_600, cached: 9_000, written: 500 },
  openai: { micro: 100 * 150 + 9_000 * 75 + 50 * 600, prompt: 9_100, cached: 9_000, written: 0 },
} as const;

interface RecordRow {
  prompt_tokens: number; completion_tokens: number; fresh_input_tokens: number; cache_read_tokens: number; cache_write_5m_tokens: number;
  cache_write_1h_tokens: number; cost_micro: number; cache_savings_micro: number; prices: string;
}
function lastRecord(): RecordRow {
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    return db.query<RecordRow, []>(
      `SELECT u.prompt_tokens, u.completion_tokens, u.fresh_input_tokens, u.cache_read_tokens, u.cache_write_5m_tokens, u.cache_write_1h_tokens,
              u.cost_micro, u.cache_savings_micro, p.prices FROM usage_records u JOIN price_lists p ON p.id = u.price_id ORDER BY u.id DESC LIMIT 1`,
    ).get()!;
  } finally {
    db.close();
  }
}

type ClientFormat = "chat" | "messages" | "responses";
const PATH: Record<ClientFormat, string> = { chat: "/v1/chat/completions", messages: "/v1/messages", responses: "/v1/responses" };

/**
 * A prompt as long as the cached one the upstream reports (~9,600 tokens): the hold is bounded by
 * what the request carries, so a tiny request that the upstream claims was 9,600 tokens would be
 * charged no more than its hold.
 */
const LONG_PROMPT = "cached context ".repeat(5_000);

function request(format: ClientFormat, model: string, stream: boolean): Record<string, unknown> {
  const ask = LONG_PROMPT;
  if (format === "responses") return { model, input: ask, stream };
  if (format === "messages") return { model, max_tokens: 1_000, messages: [{ role: "user", content: ask }], stream };
  return { model, messages: [{ role: "user", content: ask }], stream, ...(stream ? { stream_options: { include_usage: true } } : {}) };
}

/** The usage the client was told, as its format says it (the last report in a stream). */
async function clientUsage(format: ClientFormat, res: Response, stream: boolean, vendor: "openai" | "anthropic"): Promise<Record<string, any>> {
  if (!stream) {
    const body = (await res.json()) as Record<string, any>;
    return body.usage;
  }
  const frames = sseFrames(await res.text()).filter((f) => f.data.startsWith("{")).map((f) => JSON.parse(f.data));
  if (format === "chat") return frames.filter((f) => f.usage).at(-1).usage;
  if (format === "responses") return frames.filter((f) => f.response?.usage).at(-1).response.usage;
  // Anthropic: message_start carries the prompt's counts (from an Anthropic upstream, which sends
  // them first; an OpenAI upstream reports usage only at its end), message_delta the final ones.
  const start = frames.find((f) => f.type === "message_start").message.usage;
  const delta = frames.filter((f) => f.type === "message_delta").at(-1).usage;
  if (vendor === "anthropic") {
    expect(start.cache_read_input_tokens).toBe(delta.cache_read_input_tokens);
    expect(start.cache_creation_input_tokens).toBe(delta.cache_creation_input_tokens);
    expect(start.input_tokens).toBe(delta.input_tokens);
  }
  return delta;
}

describe("prompt caching is billed at the vendor's prices, through every client format and both translations", () => {
  for (const vendor of ["anthropic", "openai"] as const) {
    for (const format of ["chat", "messages", "responses"] as const) {
      for (const stream of [false, true]) {
        test(`${vendor} upstream → ${format} client, ${stream ? "stream" : "non-stream"}`, async () => {
          const model = vendor === "anthropic" ? ANTHROPIC_MODEL : OPENAI_MODEL;
          const turn = vendor === "anthropic" ? ANTHROPIC_TURN : OPENAI_TURN;
          const want = EXPECTED[vendor];
          answer(vendor, turn);
          const before = await gw.balanceMicro();
          const res = await post(gw, PATH[format], request(format, model, stream));
          expect(res.status).toBe(200);
          const usage = await clientUsage(format, res, stream, vendor);
          await gw.app.services.settled();

          // The charge: the price book's sum, to the micro-credit.
          expect(before - (await gw.balanceMicro())).toBe(want.micro);
          const record = lastRecord();
          expect(record).toMatchObject({
            prompt_tokens: want.prompt,
            completion_tokens: 50,
            fresh_input_tokens: 100,
            cache_read_tokens: 9_000,
            cache_write_5m_tokens: vendor === "anthropic" ? 300 : 0,
            cache_write_1h_tokens: vendor === "anthropic" ? 200 : 0,
            cost_micro: want.micro,
          });
          // The prices it was charged at travel with it.
          const prices = JSON.parse(record.prices);
          expect(prices).toEqual(vendor === "anthropic"
            ? { input: 3_000, output: 15_000, cacheRead: 300, cacheWrite5m: 3_750, cacheWrite1h: 6_000, perImage: 0 }
            : { input: 150, output: 600, cacheRead: 75, cacheWrite5m: 150, cacheWrite1h: 150, perImage: 0 });
          // Savings: the cached tokens as fresh input, minus what they cost.
          const asFresh = (9_000 + want.written) * prices.input;
          const paid = 9_000 * prices.cacheRead + (vendor === "anthropic" ? 300 * 3_750 + 200 * 6_000 : 0);
          expect(record.cache_savings_micro).toBe(asFresh - paid);

          // The client sees the vendor's counts in its own format.
          if (format === "chat") {
            expect(usage.prompt_tokens).toBe(want.prompt);
            expect(usage.prompt_tokens_details.cached_tokens).toBe(9_000);
            // Writes as OpenAI names them (GPT-5.6 and later), only when there were some.
            expect(usage.prompt_tokens_details.cache_write_tokens).toBe(want.written || undefined);
            expect(usage.completion_tokens).toBe(50);
            expect(usage.total_tokens).toBe(want.prompt + 50);
          } else if (format === "responses") {
            expect(usage.input_tokens).toBe(want.prompt);
            expect(usage.input_tokens_details.cached_tokens).toBe(9_000);
            expect(usage.input_tokens_details.cache_write_tokens).toBe(want.written || undefined);
            expect(usage.output_tokens).toBe(50);
          } else {
            expect(usage.input_tokens).toBe(100);
            expect(usage.cache_read_input_tokens).toBe(9_000);
            expect(usage.cache_creation_input_tokens).toBe(want.written);
            expect(usage.output_tokens).toBe(50);
          }
        });
      }
    }
  }

  test("GPT-5.6's cache writes (cache_write_tokens) are billed at 1.25× input, as OpenAI bills them, and shown on both OpenAI formats", async () => {
    // 100 fresh, 9,000 read, 500 written, 50 out at 2,500 / 15,000: reads 250 (0.1×), writes 3,125 (1.25×).
    const micro = 100 * 2_500 + 9_000 * 250 + 500 * 3_125 + 50 * 15_000;
    for (const format of ["chat", "responses"] as const) {
      answer("openai", { input: 100, cacheRead: 9_000, cacheWrite5m: 500, output: 50 });
      const before = await gw.balanceMicro();
      const res = await post(gw, PATH[format], request(format, GPT_56, false));
      expect(res.status).toBe(200);
      const usage = await clientUsage(format, res, false, "openai");
      await gw.app.services.settled();
      expect(before - (await gw.balanceMicro())).toBe(micro);
      expect(JSON.parse(lastRecord().prices)).toMatchObject({ input: 2_500, cacheRead: 250, cacheWrite5m: 3_125 });
      expect((format === "chat" ? usage.prompt_tokens_details : usage.input_tokens_details).cache_write_tokens).toBe(500);
    }
  });

  test("the issue's example: 5.625 credits, not 29.55 (every cached token at the input price)", async () => {
    answer("anthropic", { input: 100, cacheRead: 9_000, cacheWrite5m: 500, output: 50 });
    const before = await gw.balanceMicro();
    const res = await post(gw, "/v1/messages", request("messages", ANTHROPIC_MODEL, true));
    await res.text();
    await gw.app.services.settled();
    expect(before - (await gw.balanceMicro())).toBe(5_625_000);
  });

  test("writes reported without the split are all 5-minute writes; an OpenAI-format server's writes (cache_write_tokens) are recorded", async () => {
    answer("anthropic", { input: 10, cacheWrite5m: 1_000, output: 5 });
    await (await post(gw, "/v1/chat/completions", request("chat", ANTHROPIC_MODEL, false))).json();
    await gw.app.services.settled();
    expect(lastRecord()).toMatchObject({ fresh_input_tokens: 10, cache_write_5m_tokens: 1_000, cache_write_1h_tokens: 0, cost_micro: 10 * 3_000 + 1_000 * 3_750 + 5 * 15_000 });

    answer("openai", { input: 10, cacheRead: 20, cacheWrite5m: 30, output: 5 });
    const res = await post(gw, "/v1/messages", request("messages", OPENAI_MODEL, false));
    const body = (await res.json()) as any;
    expect(body.usage).toMatchObject({ input_tokens: 10, cache_read_input_tokens: 20, cache_creation_input_tokens: 30 });
    await gw.app.services.settled();
    expect(lastRecord()).toMatchObject({ prompt_tokens: 60, fresh_input_tokens: 10, cache_read_tokens: 20, cache_write_5m_tokens: 30, cost_micro: 10 * 150 + 20 * 75 + 30 * 150 + 5 * 600 });
  });

  test("writes reported as a total alone (a compatible server) are 1-hour writes when every mark of the request asked for an hour; with any other mark, 5-minute ones (a bill audit)", async () => {
    const usage = { input_tokens: 10, cache_creation_input_tokens: 1_000, cache_read_input_tokens: 0, output_tokens: 5 };
    const message = { id: "msg_total", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [{ type: "text", text: "ok" }], stop_reason: "end_turn", stop_sequence: null, usage };
    const frames = [
      `event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { ...message, content: [], stop_reason: null, usage: { ...usage, output_tokens: 1 } } })}\n\n`,
      `event: content_block_start\ndata: ${JSON.stringify({ type: "content_block_start", index: 0, content_block: { type: "text", text: "" } })}\n\n`,
      `event: content_block_delta\ndata: ${JSON.stringify({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "ok" } })}\n\n`,
      `event: content_block_stop\ndata: ${JSON.stringify({ type: "content_block_stop", index: 0 })}\n\n`,
      `event: message_delta\ndata: ${JSON.stringify({ type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 5 } })}\n\n`,
      `event: message_stop\ndata: {"type":"message_stop"}\n\n`,
    ];
    const ask = (stream: boolean, ttls: (string | undefined)[]) => post(gw, "/v1/messages", {
      model: ANTHROPIC_MODEL, max_tokens: 1_000, stream,
      system: [{ type: "text", text: LONG_PROMPT, cache_control: { type: "ephemeral", ...(ttls[0] ? { ttl: ttls[0] } : {}) } }],
      messages: [{ role: "user", content: ttls.slice(1).map((ttl) => ({ type: "text", text: "part", cache_control: { type: "ephemeral", ...(ttl ? { ttl } : {}) } })) }],
    });
    const oneHour = 10 * 3_000 + 1_000 * 6_000 + 5 * 15_000;
    const fiveMinutes = 10 * 3_000 + 1_000 * 3_750 + 5 * 15_000;
    for (const [ttls, written1h, cost] of [[["1h", "1h"], 1_000, oneHour], [["1h", undefined], 0, fiveMinutes], [["5m"], 0, fiveMinutes]] as const) {
      for (const stream of [false, true]) {
        upstream.reply(stream ? { kind: "sse", chunks: frames } : { kind: "json", body: message });
        const res = await ask(stream, [...ttls]);
        expect(res.status).toBe(200);
        await res.text();
        await gw.app.services.settled();
        expect(lastRecord()).toMatchObject({ fresh_input_tokens: 10, cache_write_5m_tokens: 1_000 - written1h, cache_write_1h_tokens: written1h, cost_micro: cost });
      }
    }
  });

  test("a message_delta that repeats input_tokens but leaves out (or nulls) the cache counts keeps message_start's: counters are cumulative", async () => {
    const start = { input_tokens: 10, cache_creation_input_tokens: 4_000, cache_read_input_tokens: 20_000, cache_creation: { ephemeral_5m_input_tokens: 1_000, ephemeral_1h_input_tokens: 3_000 }, output_tokens: 1 };
    const expected = 10 * 3_000 + 20_000 * 300 + 1_000 * 3_750 + 3_000 * 6_000 + 200 * 15_000;
    // Left out, null, not a usable count (negative), or sent as 0 (SGLang's Anthropic endpoint
    // zeroes input_tokens in message_delta): message_start's stands, counts never go down.
    for (const finalUsage of [{ input_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 200 }, { input_tokens: 10, output_tokens: 200 }, { input_tokens: 10, cache_creation_input_tokens: null, cache_read_input_tokens: null, output_tokens: 200 }, { input_tokens: 10, cache_read_input_tokens: -1, cache_creation: { ephemeral_1h_input_tokens: 1.5 }, output_tokens: 200 }]) {
      for (const format of ["messages", "chat", "responses"] as const) {
        upstream.reply((rec: RecordedRequest): Reply => vendorRefusal(rec) ?? {
          kind: "sse",
          chunks: [
            `event: message_start\ndata: ${JSON.stringify({ type: "message_start", message: { id: "msg_01Cum", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: start } })}\n\n`,
            `event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n`,
            `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Cached answer."}}\n\n`,
            `event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n`,
            `event: message_delta\ndata: ${JSON.stringify({ type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: finalUsage })}\n\n`,
            // A second message_delta with a smaller output count (a proxy's echo) does not lower it.
            `event: message_delta\ndata: ${JSON.stringify({ type: "message_delta", delta: {}, usage: { output_tokens: 1 } })}\n\n`,
            `event: message_stop\ndata: {"type":"message_stop"}\n\n`,
          ],
        });
        const before = await gw.balanceMicro();
        const res = await post(gw, PATH[format], request(format, ANTHROPIC_MODEL, true));
        expect(res.status).toBe(200);
        await res.text();
        await gw.app.services.settled();
        expect([format, before - (await gw.balanceMicro())]).toEqual([format, expected]);
        expect(lastRecord()).toMatchObject({ fresh_input_tokens: 10, cache_read_tokens: 20_000, cache_write_5m_tokens: 1_000, cache_write_1h_tokens: 3_000, completion_tokens: 200 });
      }
    }
  });

  test("a previous_response_id turn is held for the history it sends, so the vendor's count of it is charged whole", async () => {
    answer("openai", { input: 9_600, output: 50 });
    const first = (await (await post(gw, "/v1/responses", { model: OPENAI_MODEL, input: LONG_PROMPT, max_output_tokens: 50 })).json()) as { id: string };
    await gw.app.services.settled();
    // The follow-up's own body is a few bytes; what goes upstream is the whole conversation, mostly cached.
    answer("openai", { input: 68, cacheRead: 9_552, output: 50 });
    const before = await gw.balanceMicro();
    const res = await post(gw, "/v1/responses", { model: OPENAI_MODEL, previous_response_id: first.id, input: "ok, go on", max_output_tokens: 50 });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { usage: { input_tokens: number } }).usage.input_tokens).toBe(9_620);
    expect(upstream.requests.at(-1)!.rawBody).toContain(LONG_PROMPT);
    await gw.app.services.settled();
    expect(before - (await gw.balanceMicro())).toBe(68 * 150 + 9_552 * 75 + 50 * 600);
    expect(lastRecord()).toMatchObject({ fresh_input_tokens: 68, cache_read_tokens: 9_552, cost_micro: 68 * 150 + 9_552 * 75 + 50 * 600 });
  });

  test("an upstream whose cache counts exceed its prompt is cut down to the prompt: no class goes negative", async () => {
    upstream.reply((rec: RecordedRequest): Reply => vendorRefusal(rec) ?? {
      kind: "json",
      body: { id: "chatcmpl-x", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }],
        usage: { prompt_tokens: 100, completion_tokens: 5, total_tokens: 105, prompt_tokens_details: { cached_tokens: 500 } } },
    });
    await (await post(gw, "/v1/chat/completions", request("chat", OPENAI_MODEL, false))).json();
    await gw.app.services.settled();
    expect(lastRecord()).toMatchObject({ prompt_tokens: 100, fresh_input_tokens: 0, cache_read_tokens: 100, cost_micro: 100 * 75 + 5 * 600 });
    // Clients of the other formats are shown what is charged, never more cached than prompt.
    const shown: Record<string, unknown>[] = [];
    for (const format of ["messages", "responses"] as const) {
      upstream.reply((rec: RecordedRequest): Reply => vendorRefusal(rec) ?? {
        kind: "json",
        body: { id: "chatcmpl-x", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }],
          usage: { prompt_tokens: 100, completion_tokens: 5, total_tokens: 105, prompt_tokens_details: { cached_tokens: 500 } } },
      });
      shown.push(((await (await post(gw, PATH[format], request(format, OPENAI_MODEL, false))).json()) as { usage: Record<string, unknown> }).usage);
    }
    expect(shown[0]).toMatchObject({ input_tokens: 0, cache_read_input_tokens: 100 });
    expect(shown[1]).toMatchObject({ input_tokens: 100, input_tokens_details: { cached_tokens: 100 } });
  });

  test("reports and CSV show the classes and the savings; the audit recomputes every record, and finds one altered by hand", async () => {
    answer("anthropic", ANTHROPIC_TURN);
    await (await post(gw, "/v1/messages", request("messages", ANTHROPIC_MODEL, false))).json();
    await gw.app.services.settled();
    const db = new Database(gw.dbPath, { readonly: true });
    const sums = db.query<Record<string, number>, []>(
      `SELECT COUNT(*) AS requests, SUM(fresh_input_tokens) AS fresh, SUM(cache_read_tokens) AS reads, SUM(cache_write_5m_tokens) AS w5,
              SUM(cache_write_1h_tokens) AS w1, SUM(cost_micro) AS cost, SUM(cache_savings_micro) AS savings FROM usage_records`,
    ).get()!;
    db.close();
    expect(sums.reads).toBeGreaterThan(9_000);

    const admin = { authorization: `Bearer ${ADMIN}` };
    const to = new Date(Date.now() + 60_000).toISOString();
    const report = (await (await fetch(`${gw.url}/v1/admin/usage?group_by=&to=${to}`, { headers: admin })).json()) as any;
    expect(report.total).toMatchObject({
      requests: sums.requests, fresh_input_tokens: sums.fresh, cache_read_tokens: sums.reads, cache_write_5m_tokens: sums.w5,
      cache_write_1h_tokens: sums.w1, cost: sums.cost / 1e6, cache_savings: sums.savings / 1e6,
    });
    const csv = await (await fetch(`${gw.url}/v1/admin/usage?group_by=&to=${to}&format=csv`, { headers: admin })).text();
    const [header, row] = csv.split("\r\n");
    const cells = Object.fromEntries(header!.split(",").map((name, i) => [name, row!.split(",")[i]]));
    expect(Number(cells.cache_read_tokens)).toBe(sums.reads);
    expect(Number(cells.cache_savings)).toBeCloseTo(sums.savings / 1e6, 6);
    const perAccount = (await (await fetch(`${gw.url}/v1/admin/accounts/${gw.accountId}/usage`, { headers: admin })).json()) as any;
    expect(perAccount.total).toMatchObject({ cache_read_tokens: sums.reads, cache_savings: sums.savings / 1e6 });

    const env = { SWITCHYARD_DB: gw.dbPath };
    const clean = await runAdmin(["audit"], env);
    const report1 = JSON.parse(clean.out);
    expect(clean.code).toBe(0);
    expect(report1.mispriced).toEqual([]);
    expect(report1.pricedRecords).toBe(sums.requests);

    // An operator "fixes" one record's cache reads by hand: its charge no longer follows from its classes.
    const rw = new Database(gw.dbPath);
    const victim = rw.query<{ request_id: string }, []>("SELECT request_id FROM usage_records WHERE cache_read_tokens > 0 ORDER BY id LIMIT 1").get()!;
    rw.query("UPDATE usage_records SET cache_read_tokens = cache_read_tokens - 1000, fresh_input_tokens = fresh_input_tokens + 1000 WHERE request_id = ?").run(victim.request_id);
    rw.close();
    const dirty = await runAdmin(["audit"], env);
    expect(dirty.code).toBe(1);
    const found = JSON.parse(dirty.out).mispriced;
    expect(found.map((m: any) => m.request_id)).toEqual([victim.request_id]);
    expect(found[0].problem).toContain("price book");
  });
});

describe("DeepSeek's cache hits", () => {
  for (const stream of [false, true]) {
    test(`are read from prompt_cache_hit_tokens (it sends no cached_tokens) and billed at the configured read price, ${stream ? "streamed" : "whole"}`, async () => {
      // DeepSeek's usage: prompt_tokens is hits plus misses; they were all priced as fresh input.
      const usage = { prompt_tokens: 9_100, completion_tokens: 50, total_tokens: 9_150, prompt_cache_hit_tokens: 9_000, prompt_cache_miss_tokens: 100 };
      const head = { id: "chatcmpl-ds", created: 1, model: "deepseek-v4-flash", system_fingerprint: "fp_ds" };
      upstream.reply(stream
        ? { kind: "sse", chunks: [
            `data: ${JSON.stringify({ ...head, object: "chat.completion.chunk", choices: [{ index: 0, delta: { role: "assistant", content: "Cached." }, finish_reason: null }] })}\n\n`,
            `data: ${JSON.stringify({ ...head, object: "chat.completion.chunk", choices: [{ index: 0, delta: { content: "" }, finish_reason: "stop" }], usage })}\n\n`,
            "data: [DONE]\n\n",
          ] }
        : { kind: "json", body: { ...head, object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: "Cached." }, finish_reason: "stop" }], usage } });
      const before = await gw.balanceMicro();
      const res = await post(gw, "/v1/chat/completions", request("chat", DEEPSEEK, stream));
      expect(res.status).toBe(200);
      const shown = await clientUsage("chat", res, stream, "openai");
      await gw.app.services.settled();
      expect(before - (await gw.balanceMicro())).toBe(100 * 150 + 9_000 * 3 + 50 * 600);
      expect(lastRecord()).toMatchObject({ prompt_tokens: 9_100, fresh_input_tokens: 100, cache_read_tokens: 9_000 });
      // A chat client of a chat upstream gets the vendor's usage as it came (DeepSeek's own fields).
      expect(shown.prompt_cache_hit_tokens).toBe(9_000);
    });
  }
});

describe("holds and the model list", () => {
  test("the hold covers a prompt written whole to the 1-hour cache (twice the input price)", async () => {
    // 2,000 tokens of prompt all written for an hour cost 2 × 3,000 per million more than fresh input would.
    const prompt = "word ".repeat(2_000);
    answer("anthropic", { input: 0, cacheWrite1h: 2_100, output: 10 });
    const before = await gw.balanceMicro();
    const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 10, messages: [{ role: "user", content: prompt }] });
    expect(res.status).toBe(200);
    await res.json();
    await gw.app.services.settled();
    expect(before - (await gw.balanceMicro())).toBe(2_100 * 6_000 + 10 * 15_000);
  });

  test("credits_per_msg counts the image of an image model", async () => {
    const res = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${gw.key}` } });
    const models = ((await res.json()) as any).data as { id: string; credits_per_msg: number }[];
    // test/image: per_image 0.5 and free tokens → one credit (rounded up); test/image-chat: 0.25 per image plus 150 tokens' worth.
    expect(models.find((m) => m.id === "test/image")!.credits_per_msg).toBe(1);
    expect(models.find((m) => m.id === "test/image-chat")!.credits_per_msg).toBe(1);
  });
});
