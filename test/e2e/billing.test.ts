import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { FREE_MODEL, IMAGES_API_MODEL, OPENAI_MODEL, ANTHROPIC_MODEL, post, sseFrames, startGateway, type Gateway, spendUntilRefused } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();

const question = [{ role: "user", content: "Hello there" }];

async function records(gw: Gateway) {
  await gw.app.services.settled();
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    return db.query<{ status: string; cost_micro: number; prompt_tokens: number; completion_tokens: number; estimated: number; model: string; key_id: string }, []>(
      "SELECT status, cost_micro, prompt_tokens, completion_tokens, estimated, model, key_id FROM usage_records ORDER BY id",
    ).all();
  } finally {
    db.close();
  }
}

function rejections(gw: Gateway) {
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    return db.query<{ key_id: string; status: number; count: number }, []>("SELECT key_id, status, SUM(count) AS count FROM rejection_counts GROUP BY key_id, status").all();
  } finally {
    db.close();
  }
}

function openReservations(gw: Gateway): number {
  return gw.app.services.ledger.openHolds();
}

describe("reserve, then settle", () => {
  test("200 parallel requests on a balance that covers only some: never below zero, every credit accounted for", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url, credits: 2 });
    try {
      const start = await gw.balanceMicro();
      const statuses = await Promise.all(
        Array.from({ length: 200 }, (_, i) =>
          post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 1000, messages: question, stream: i % 2 === 0 }).then(async (res) => {
            await res.text();
            return res.status;
          }),
        ),
      );
      const end = await gw.balanceMicro();
      const ok = statuses.filter((s) => s === 200).length;
      const refused = statuses.filter((s) => s === 402).length;
      expect(ok + refused).toBe(200);
      expect(ok).toBeGreaterThan(0);
      expect(refused).toBeGreaterThan(0);
      expect(end).toBeGreaterThanOrEqual(0);
      const all = await records(gw);
      const charged = all.filter((r) => r.status === "ok");
      expect(charged.length).toBe(ok);
      // Refused requests are counted (per key and minute), at no cost, without a row each.
      expect(all.length).toBe(ok);
      expect(rejections(gw)).toEqual([{ key_id: gw.keyId, status: 402, count: refused }]);
      expect(charged.reduce((sum, r) => sum + r.cost_micro, 0)).toBe(start - end);
      expect(openReservations(gw)).toBe(0);
    } finally {
      await gw.stop();
    }
  }, 30_000);

  test("402 when the worst case exceeds the balance, with a clear message and no upstream call", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url, credits: 0.05 });
    try {
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 8000, messages: question });
      expect(res.status).toBe(402);
      // Not worth an SDK's automatic retry: the same balance meets the same request.
      expect(res.headers.get("x-should-retry")).toBe("false");
      const body = (await res.json()) as any;
      expect(body.error.type).toBe("insufficient_quota");
      expect(body.error.message).toMatch(/credits/);
      expect(upstream.requests.length).toBe(0);
      const anthropic = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 8000, messages: question });
      expect(anthropic.status).toBe(402);
      expect(((await anthropic.json()) as any).error.type).toBe("billing_error");
      // A smaller max_tokens fits.
      expect((await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 10, messages: question })).status).toBe(200);
    } finally {
      await gw.stop();
    }
  });

  test("one request after another, each settled before the next: refused once the settled charges leave less than the worst case", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url, credits: 2 });
    try {
      const start = await gw.balanceMicro();
      // A worst case of about 1.9 credits: only the first few requests fit before the charges add up.
      const ask = () => post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 3100, messages: question });
      const { answered: ok, refusal } = await spendUntilRefused(gw, ask);
      expect(ok).toBeGreaterThan(1);
      expect(refusal).toBeDefined();
      const end = await gw.balanceMicro();
      const charged = (await records(gw)).filter((r) => r.status === "ok");
      expect(charged.length).toBe(ok);
      expect(charged.reduce((sum, r) => sum + r.cost_micro, 0)).toBe(start - end);
      // The refusal quotes what is left on disk, and that is less than the request's worst case.
      const [, worst, available] = /up to ([\d.]+) credits and the account has ([\d.]+) available/.exec(refusal.error.message)!.map(Number);
      expect(available).toBe(end / 1e6);
      expect(available).toBeLessThan(worst!);
      expect(end).toBeGreaterThanOrEqual(0);
    } finally {
      await gw.stop();
    }
  });

  test("a top-up committed by another process is seen by the running gateway", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url, credits: 0.05 });
    try {
      const ask = () => post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 8000, messages: question });
      expect((await ask()).status).toBe(402);
      const other = new Database(gw.dbPath);
      try {
        other.run("UPDATE accounts SET balance_micro = balance_micro + 10000000 WHERE id = ?", [gw.accountId]);
      } finally {
        other.close();
      }
      await Bun.sleep(5);
      expect((await ask()).status).toBe(200);
    } finally {
      await gw.stop();
    }
  });

  test("free models cost nothing, even on an empty account, and still leave a usage record", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url, credits: 0 });
    try {
      const res = await post(gw, "/v1/chat/completions", { model: FREE_MODEL, messages: question });
      expect(res.status).toBe(200);
      expect(await gw.balanceMicro()).toBe(0);
      expect((await records(gw))).toEqual([expect.objectContaining({ model: FREE_MODEL, cost_micro: 0, status: "ok" })]);
    } finally {
      await gw.stop();
    }
  });

  test("the charge is the counted usage, exactly", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url });
    try {
      const start = await gw.balanceMicro();
      upstream.reply({ kind: "fixture", name: "anthropic-text.sse" });
      await (await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, messages: question, stream: true })).text();
      const [record] = (await records(gw));
      expect(record).toMatchObject({ prompt_tokens: 12, completion_tokens: 9, estimated: 0, status: "ok", key_id: gw.keyId });
      expect(record!.cost_micro).toBe(12 * 3000 + 9 * 15000);
      expect(start - (await gw.balanceMicro())).toBe(record!.cost_micro);
    } finally {
      await gw.stop();
    }
  });
});

describe("usage an upstream reports that cannot be true", () => {
  test("negative counts on a same-format stream: not relayed; the client that asked for usage sees what was charged", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url });
    try {
      const chunk = (body: object) => `data: ${JSON.stringify({ id: "chatcmpl-x", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", ...body })}\n\n`;
      upstream.reply({ kind: "sse", chunks: [
        chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "hello" }, finish_reason: null }] }),
        chunk({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }),
        chunk({ choices: [], usage: { prompt_tokens: -1_000_000, completion_tokens: -1_000_000, total_tokens: -2_000_000 } }),
        "data: [DONE]\n\n",
      ] });
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 50, stream: true, stream_options: { include_usage: true }, messages: question });
      const text = await res.text();
      expect(text).not.toContain("-1000000");
      const chunks = sseFrames(text).filter((f) => f.data !== "[DONE]").map((f) => JSON.parse(f.data));
      const usage = chunks.filter((c) => c.usage).map((c) => c.usage);
      expect(usage).toHaveLength(1);
      const [record] = await records(gw);
      expect(record).toMatchObject({ estimated: 1, status: "ok" });
      expect(usage[0]).toMatchObject({ prompt_tokens: record!.prompt_tokens, completion_tokens: record!.completion_tokens });
      expect(record!.cost_micro).toBe(record!.prompt_tokens * 150 + record!.completion_tokens * 600);
    } finally {
      await gw.stop();
    }
  });
});

describe("output an upstream reports past the answer limit", () => {
  const chunk = (body: object) => `data: ${JSON.stringify({ id: "chatcmpl-x", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", ...body })}\n\n`;

  test("is counted at the limit the request was sent with (streamed, cut, whole; n answers together), never charged up to the hold", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url, credits: 100 });
    try {
      // One word, then a usage claiming 800 output tokens under max_tokens 50, then the stream ends without its finish or [DONE].
      upstream.reply({ kind: "sse", chunks: [
        chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "Hello" }, finish_reason: null }] }),
        chunk({ choices: [], usage: { prompt_tokens: 10, completion_tokens: 800, total_tokens: 810 } }),
      ] });
      await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 50, stream: true, messages: question })).text();
      // Whole, and with n = 2 (the upstream's count covers both answers).
      upstream.reply({ kind: "json", body: { id: "chatcmpl-x", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "Hi" }, finish_reason: "stop" }], usage: { prompt_tokens: 10, completion_tokens: 50_000, total_tokens: 50_010 } } });
      await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 40, messages: question })).text();
      upstream.reply({ kind: "json", body: { id: "chatcmpl-x", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [0, 1].map((index) => ({ index, message: { role: "assistant", content: "Hi" }, finish_reason: "stop" })), usage: { prompt_tokens: 10, completion_tokens: 5_000, total_tokens: 5_010 } } });
      await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 30, n: 2, messages: question })).text();
      // Within the limit: as reported.
      upstream.reply({ kind: "json", body: { id: "chatcmpl-x", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "Hi" }, finish_reason: "stop" }], usage: { prompt_tokens: 10, completion_tokens: 33, total_tokens: 43 } } });
      await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 40, messages: question })).text();
      const all = await records(gw);
      expect(all.map((r) => [r.status, r.prompt_tokens, r.completion_tokens, r.cost_micro])).toEqual([
        ["stream_failed", 10, 50, 10 * 150 + 50 * 600],
        ["ok", 10, 40, 10 * 150 + 40 * 600],
        ["ok", 10, 60, 10 * 150 + 60 * 600],
        ["ok", 10, 33, 10 * 150 + 33 * 600],
      ]);
    } finally {
      await gw.stop();
    }
  });
});

describe("n answers (OpenAI's n)", () => {
  /** An OpenAI answer with `n` choices of `each` completion tokens, usage over all of them, as the vendor reports it. */
  const answers = (n: number, each: number) => ({
    id: "chatcmpl-n", object: "chat.completion", created: 1761565012, model: "gpt-4o-mini",
    choices: Array.from({ length: n }, (_, index) => ({ index, message: { role: "assistant", content: `answer ${index}`, refusal: null }, logprobs: null, finish_reason: "length" })),
    usage: { prompt_tokens: 10, completion_tokens: n * each, total_tokens: 10 + n * each },
  });
  const streamed = (n: number, each: number) => [
    ...Array.from({ length: n }, (_, index) => `data: ${JSON.stringify({ id: "chatcmpl-n", object: "chat.completion.chunk", created: 1761565012, model: "gpt-4o-mini", choices: [{ index, delta: { role: "assistant", content: `answer ${index}` }, finish_reason: null }] })}\n\n`),
    ...Array.from({ length: n }, (_, index) => `data: ${JSON.stringify({ id: "chatcmpl-n", object: "chat.completion.chunk", created: 1761565012, model: "gpt-4o-mini", choices: [{ index, delta: {}, finish_reason: "length" }] })}\n\n`),
    `data: ${JSON.stringify({ id: "chatcmpl-n", object: "chat.completion.chunk", created: 1761565012, model: "gpt-4o-mini", choices: [], usage: { prompt_tokens: 10, completion_tokens: n * each, total_tokens: 10 + n * each } })}\n\n`,
    "data: [DONE]\n\n",
  ];

  test("every answer is held for and charged, streamed or not: n × 1,000 tokens cost n times one answer", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url });
    try {
      const start = await gw.balanceMicro();
      upstream.reply({ kind: "json", body: answers(8, 1000) });
      const whole = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, n: 8, max_tokens: 1000, messages: question });
      expect(whole.status).toBe(200);
      const body = (await whole.json()) as { choices: unknown[]; usage: { completion_tokens: number } };
      expect(body.choices.length).toBe(8);
      expect(body.usage.completion_tokens).toBe(8000);
      expect(upstream.requests.at(-1)!.body.n).toBe(8);

      upstream.reply({ kind: "sse", chunks: streamed(3, 1000) });
      const stream = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, n: 3, max_tokens: 1000, messages: question, stream: true });
      const frames = sseFrames(await stream.text());
      expect(new Set(frames.filter((f) => f.data !== "[DONE]").flatMap((f) => JSON.parse(f.data).choices.map((c: { index: number }) => c.index)))).toEqual(new Set([0, 1, 2]));

      const [first, second] = await records(gw);
      // Charged what the vendor counted for all of them, not capped at one answer's hold.
      expect(first).toMatchObject({ prompt_tokens: 10, completion_tokens: 8000, status: "ok" });
      expect(first!.cost_micro).toBe(10 * 150 + 8000 * 600);
      expect(second).toMatchObject({ prompt_tokens: 10, completion_tokens: 3000, status: "ok" });
      expect(second!.cost_micro).toBe(10 * 150 + 3000 * 600);
      expect(start - (await gw.balanceMicro())).toBe(first!.cost_micro + second!.cost_micro);
      expect(openReservations(gw)).toBe(0);
    } finally {
      await gw.stop();
    }
  });

  test("the hold covers every answer: a balance for one answer but not for three is a 402 for n = 3, before any upstream call", async () => {
    // One answer's worst case is about 0.6 credits (1,000 tokens at 600 per million), three are 1.8.
    const gw = await startGateway({ upstreamUrl: upstream.url, credits: 1 });
    try {
      const refused = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, n: 3, max_tokens: 1000, messages: question });
      expect(refused.status).toBe(402);
      expect(((await refused.json()) as any).error.type).toBe("insufficient_quota");
      expect(upstream.requests.length).toBe(0);
      const one = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, n: 1, max_tokens: 1000, messages: question });
      expect(one.status).toBe(200);
      await one.text();
    } finally {
      await gw.stop();
    }
  });

  test("an upstream that does not report usage: n answers are estimated as n times the first one", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url });
    try {
      const unreported = (n: number) => ({ ...answers(n, 0), usage: undefined });
      upstream.reply({ kind: "json", body: unreported(1) });
      await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 1000, messages: question })).text();
      upstream.reply({ kind: "json", body: unreported(3) });
      await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, n: 3, max_tokens: 1000, messages: question })).text();
      const [one, three] = await records(gw);
      expect(one).toMatchObject({ estimated: 1, status: "ok" });
      expect(one!.completion_tokens).toBeGreaterThan(0);
      expect(three).toMatchObject({ estimated: 1, status: "ok", prompt_tokens: one!.prompt_tokens, completion_tokens: 3 * one!.completion_tokens });
      expect(three!.cost_micro).toBe(one!.prompt_tokens * 150 + 3 * one!.completion_tokens * 600);
    } finally {
      await gw.stop();
    }
  });

  test("a stream of n answers without a usage report: a short first answer does not price the long others; each of their frames counts a token at least", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url });
    try {
      const chunk = (index: number, delta: Record<string, unknown>, finish: string | null = null) =>
        `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", choices: [{ index, delta, finish_reason: finish }] })}\n\n`;
      const chunks = [0, 1, 2].map((i) => chunk(i, { role: "assistant", content: "" }));
      chunks.push(chunk(0, { content: "Ok" }), chunk(0, {}, "stop"));
      for (const i of [1, 2]) {
        for (let w = 0; w < 60; w++) chunks.push(chunk(i, { content: " word" }));
        chunks.push(chunk(i, {}, "stop"));
      }
      chunks.push("data: [DONE]\n\n");
      upstream.reply({ kind: "sse", chunks });
      await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, n: 3, max_tokens: 1000, messages: question, stream: true })).text();
      const [row] = await records(gw);
      // 120 words went out in answers 1 and 2; "Ok" × 3 would be 3 tokens.
      expect(row).toMatchObject({ estimated: 1, status: "ok" });
      expect(row!.completion_tokens).toBeGreaterThanOrEqual(120);
      expect(row!.completion_tokens).toBeLessThanOrEqual(3_000);
    } finally {
      await gw.stop();
    }
  });

  test("an upstream that reports the output but not the prompt: the output it reported, for all n answers, is charged once", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url });
    try {
      upstream.reply({ kind: "json", body: { ...answers(3, 0), usage: { completion_tokens: 3000 } } });
      await (await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, n: 3, max_tokens: 1000, messages: question })).text();
      const [record] = await records(gw);
      // The prompt is estimated; the output is the vendor's count for all three, not multiplied again.
      expect(record).toMatchObject({ estimated: 1, completion_tokens: 3000 });
    } finally {
      await gw.stop();
    }
  });

  test("n outside 1–128 is a 400; an Anthropic upstream makes one answer and is held for one", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url, credits: 1 });
    try {
      for (const n of [0, 129, 1.5, "2"]) {
        const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, n, messages: question });
        expect(res.status).toBe(400);
        expect(((await res.json()) as any).error.type).toBe("invalid_request_error");
      }
      // Translated to Anthropic, the request asks for one answer: a balance for one is enough.
      const res = await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, n: 3, max_tokens: 20, messages: question });
      expect(res.status).toBe(200);
      await res.text();
      expect(upstream.requests.at(-1)!.body.n).toBeUndefined();
    } finally {
      await gw.stop();
    }
  });
});

describe("failures cost nothing; partial answers cost what they produced", () => {
  test("a stream the upstream breaks before its first token costs nothing, though it announced the prompt's tokens", async () => {
    // Not retried, so each failure is the client's: a 502 (the head waits for the first text).
    const gw = await startGateway({ upstreamUrl: upstream.url, retry: { max_retries: 0 } });
    try {
      const start = await gw.balanceMicro();
      const ev = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
      // Anthropic: message_start carries input_tokens, then overloaded_error, no content at all.
      upstream.reply({ kind: "sse", chunks: [
        ev("message_start", { message: { id: "msg_x", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5000, output_tokens: 1 } } }),
        ev("ping", {}),
        ev("error", { error: { type: "overloaded_error", message: "Overloaded" } }),
      ] });
      const anthropic = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, stream: true, messages: question });
      expect(anthropic.status).toBe(502);
      expect(await anthropic.json()).toMatchObject({ type: "error", error: { type: "overloaded_error" } });
      // OpenAI: a role frame and a usage-only chunk, then an error frame.
      const chunk = (body: object) => `data: ${JSON.stringify({ id: "chatcmpl-x", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", ...body })}\n\n`;
      upstream.reply({ kind: "sse", chunks: [
        chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] }),
        chunk({ choices: [], usage: { prompt_tokens: 5000, completion_tokens: 0, total_tokens: 5000 } }),
        `data: ${JSON.stringify({ error: { message: "overloaded", type: "server_error" } })}\n\n`,
      ] });
      const openai = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 50, stream: true, messages: question });
      expect(openai.status).toBe(502);
      expect(((await openai.json()) as any).error.type).toBeString();
      const all = await records(gw);
      expect(all.map((r) => r.cost_micro)).toEqual([0, 0]);
      expect(await gw.balanceMicro()).toBe(start);
      expect(openReservations(gw)).toBe(0);
    } finally {
      await gw.stop();
    }
  });

  test("retried after overloaded_error before its first text (max_retries 2): the answer that came is charged once, the failed attempt's announced prompt not at all", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url, retry: { max_retries: 2, max_wait_ms: 2_000 } });
    try {
      const start = await gw.balanceMicro();
      const ev = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
      // The first attempt announces a 5,000-token prompt, then is overloaded; the second answers as the vendor does.
      upstream.reply({ kind: "sse", chunks: [
        ev("message_start", { message: { id: "msg_x", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5000, output_tokens: 1 } } }),
        ev("error", { error: { type: "overloaded_error", message: "Overloaded" } }),
      ] });
      const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 50, stream: true, messages: question });
      expect(res.status).toBe(200);
      const frames = sseFrames(await res.text());
      const delta = JSON.parse(frames.findLast((f) => f.event === "message_delta")!.data);
      const started = JSON.parse(frames.find((f) => f.event === "message_start")!.data);
      const input = started.message.usage.input_tokens as number;
      const output = delta.usage.output_tokens as number;
      expect(input).toBeLessThan(5000);
      expect(upstream.requests.filter((r) => r.path === "/v1/messages").length).toBeGreaterThanOrEqual(2);
      const all = await records(gw);
      expect(all).toHaveLength(1);
      expect(all[0]).toMatchObject({ status: "ok", prompt_tokens: input, completion_tokens: output });
      // ANTHROPIC_PRICING: 3,000 and 15,000 credits a million tokens, so as many micro-credits a token.
      expect(all[0]!.cost_micro).toBe(input * 3000 + output * 15000);
      expect(await gw.balanceMicro()).toBe(start - (input * 3000 + output * 15000));
      expect(openReservations(gw)).toBe(0);
    } finally {
      await gw.stop();
    }
  });

  test("an upstream that never sends its first byte → 502, nothing charged", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url, firstByteMs: 200 });
    try {
      const start = await gw.balanceMicro();
      upstream.reply({ kind: "hang" });
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
      expect(res.status).toBe(502);
      expect(((await res.json()) as any).error.message).toMatch(/in time/);
      expect(await gw.balanceMicro()).toBe(start);
      expect((await records(gw))[0]).toMatchObject({ status: "upstream_error", cost_micro: 0 });
      expect(openReservations(gw)).toBe(0);
    } finally {
      await gw.stop();
    }
  });

  test("a stream cut midway is charged for what was produced, never more than the reservation", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url });
    try {
      const start = await gw.balanceMicro();
      const chunk = (text: string) => `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":${JSON.stringify(text)}},"finish_reason":null}]}\n\n`;
      upstream.reply({ kind: "sse", chunks: [chunk("The answer is"), chunk(" forty"), 'data: {"id":"c","object":"chat.co'] });
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 100, messages: question, stream: true });
      const frames = sseFrames(await res.text());
      expect(JSON.parse(frames.at(-1)!.data).error).toBeDefined();
      const [record] = (await records(gw));
      expect(record!.status).toBe("stream_failed");
      expect(record!.estimated).toBe(1);
      expect(record!.completion_tokens).toBeGreaterThan(0);
      expect(record!.cost_micro).toBeGreaterThan(0);
      const worstCase = Math.ceil((Math.ceil(JSON.stringify({ model: OPENAI_MODEL, max_tokens: 100, messages: question, stream: true }).length / 2) + 16) * 150 + 100 * 600);
      expect(record!.cost_micro).toBeLessThanOrEqual(worstCase);
      expect(start - (await gw.balanceMicro())).toBe(record!.cost_micro);
    } finally {
      await gw.stop();
    }
  });

  test("a client that disconnects mid-stream aborts the upstream and pays for what was produced", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url });
    try {
      const start = await gw.balanceMicro();
      upstream.reply({ kind: "sse", holdOpen: true, chunks: ['data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Partial answer here"},"finish_reason":null}]}\n\n'] });
      const controller = new AbortController();
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question, stream: true }, {}, controller.signal);
      const reader = res.body!.getReader();
      expect(new TextDecoder().decode((await reader.read()).value)).toContain("Partial");
      controller.abort();
      const deadline = Date.now() + 3000;
      while (upstream.abortedStreams() < 1 && Date.now() < deadline) await Bun.sleep(10);
      expect(upstream.abortedStreams()).toBe(1);
      const end = await gw.balanceMicro();
      const [record] = (await records(gw));
      expect(record!.status).toBe("cancelled");
      expect(record!.completion_tokens).toBe(3);
      expect(record!.cost_micro).toBeGreaterThan(0);
      expect(start - end).toBe(record!.cost_micro);
      expect(openReservations(gw)).toBe(0);
    } finally {
      await gw.stop();
    }
  });
});

describe("rate limit", () => {
  test("the headers ride on every kind of answer: JSON, streams, a whole answer sent as a stream, errors from inside the pipeline", async () => {
    // A clock that stands still: the bucket must not refill between answers, however slow they are.
    const now = 1_800_000_000_000;
    const gw = await startGateway({ upstreamUrl: upstream.url, requestsPerMinute: 100, credits: 1, now: () => now });
    try {
      const answers: [string, () => Promise<Response>, number][] = [
        ["JSON answer", () => post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 10, messages: question }), 200],
        // JSON answers are built with the route's headers (respond.ts): every JSON route, each header once.
        ["JSON answer, translated (messages)", () => post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 10, messages: question }), 200],
        ["JSON answer (responses, stored)", () => post(gw, "/v1/responses", { model: OPENAI_MODEL, max_output_tokens: 16, input: "hi", store: true }), 200],
        ["JSON answer (responses, not stored)", () => post(gw, "/v1/responses", { model: OPENAI_MODEL, max_output_tokens: 16, input: "hi", store: false }), 200],
        ["stream, relayed", () => post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 10, messages: question, stream: true }), 200],
        ["stream, translated", () => post(gw, "/v1/messages", { model: OPENAI_MODEL, max_tokens: 10, messages: question, stream: true }), 200],
        ["a whole answer as a stream (the images API)", () => {
          upstream.reply({ kind: "json", body: { created: 1, data: [{ b64_json: "iVBORw0KGgo=", revised_prompt: "x" }] } });
          return post(gw, "/v1/chat/completions", { model: IMAGES_API_MODEL, messages: question, stream: true });
        }, 200],
        ["402 from the reservation", () => post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, max_tokens: 8000, messages: question }), 402],
        ["an upstream's refusal", () => {
          upstream.reply({ kind: "json", status: 400, body: { error: { message: "no", type: "invalid_request_error" } } });
          return post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 10, messages: question });
        }, 400],
      ];
      let remaining = 100;
      for (const [what, send, status] of answers) {
        const res = await send();
        await res.text();
        expect([what, res.status]).toEqual([what, status]);
        expect([what, res.headers.get("x-ratelimit-limit-requests"), res.headers.get("x-ratelimit-remaining-requests")]).toEqual([what, "100", String(--remaining)]);
        // The answer's own type is kept.
        expect(res.headers.get("content-type")).toStartWith(status === 200 && !what.startsWith("JSON answer") ? "text/event-stream" : "application/json");
        // The request's id, once (a second copy would read "a, b").
        expect([what, res.headers.get("x-request-id")]).toEqual([what, expect.stringMatching(/^[0-9a-f-]{36}$/)]);
        if (what.includes("messages")) expect(res.headers.get("request-id")).toBe(res.headers.get("x-request-id"));
      }
    } finally {
      await gw.stop();
    }
  });

  test("the 61st request in a minute gets 429 with Retry-After; the bucket refills; headers on every answer", async () => {
    let now = 1_800_000_000_000;
    const gw = await startGateway({ upstreamUrl: upstream.url, requestsPerMinute: 60, now: () => now });
    try {
      for (let i = 0; i < 60; i++) {
        const res = await post(gw, "/v1/chat/completions", i % 2 ? { model: OPENAI_MODEL, messages: question, stream: true } : "{not json");
        expect(res.status).toBe(i % 2 ? 200 : 400);
        expect(res.headers.get("x-ratelimit-limit-requests")).toBe("60");
        expect(res.headers.get("x-ratelimit-remaining-requests")).toBe(String(59 - i));
        expect(res.headers.get("x-ratelimit-reset-requests")).toMatch(/^\d+(\.\d+)?(ms|s)$|^\d+m[\d.]+s$/);
        await res.text();
      }
      const limited = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 5, messages: question });
      expect(limited.status).toBe(429);
      expect(limited.headers.get("retry-after")).toBe("1");
      // The exact wait, which the SDKs read first: one token of 60 a minute.
      expect(limited.headers.get("retry-after-ms")).toBe("1000");
      const body = (await limited.json()) as any;
      expect(body).toMatchObject({ type: "error", error: { type: "rate_limit_error" } });
      expect(upstream.requests.length).toBe(30);

      now += 1000;
      expect((await post(gw, "/v1/chat/completions", { model: FREE_MODEL, messages: question })).status).toBe(200);
      expect((await post(gw, "/v1/chat/completions", { model: FREE_MODEL, messages: question })).status).toBe(429);
    } finally {
      await gw.stop();
    }
  });
});

describe("an answer relayed frame by frame without usage", () => {
  test("is estimated from every frame's text, the ones relayed undecoded included", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url });
    try {
      const chunk = (body: object) => `data: ${JSON.stringify({ id: "chatcmpl-Relay", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", system_fingerprint: "fp_1", ...body })}\n\n`;
      const words = Array.from({ length: 30 }, (_, i) => ` lighthouse${i}`);
      upstream.reply({ kind: "sse", chunks: [
        chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }] }),
        // The same head on every text chunk: after the first, each is relayed as it came (skimmed), not decoded.
        ...words.map((w) => chunk({ choices: [{ index: 0, delta: { content: w }, logprobs: null, finish_reason: null }] })),
        chunk({ choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: "stop" }] }),
        "data: [DONE]\n\n",
      ] });
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 500, stream: true, messages: question });
      const text = await res.text();
      expect(text).toContain("lighthouse29");
      const [record] = await records(gw);
      expect(record).toMatchObject({ estimated: 1, status: "ok" });
      // Every word is at least one token (and "lighthouse" with a number more than one).
      expect(record!.completion_tokens).toBeGreaterThanOrEqual(60);
    } finally {
      await gw.stop();
    }
  });
});

describe("an estimated prompt", () => {
  test("counts what the vendor adds around each message, as the window's fit does (a bill audit: \"hello world\" was billed 2 prompt tokens where OpenAI counts 9)", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url });
    try {
      upstream.reply({ kind: "json", body: { id: "chatcmpl-nousage", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "Hi there" }, finish_reason: "stop" }] } });
      const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, max_tokens: 50, messages: [{ role: "user", content: "hello world" }] });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      const [record] = await records(gw);
      // "hello world" is 2 tokens; a message's framing 4, the answer's priming 3.
      expect(record).toMatchObject({ estimated: 1, prompt_tokens: 2 + 4 + 3 });
    } finally {
      await gw.stop();
    }
  });
});

describe("the hold of a long conversation", () => {
  test("is capped at the model's context window: text that bounds high (escaped quotes) is not held for more prompt than the model can bill", async () => {
    // 600,000 quote characters: 1.2 MB of JSON, a bound of ~600,000 tokens (bytes / 2), a few tens of
    // thousands counted, on a 200,000-token model. Held for the bound at the dearest prompt price
    // (6,000 credits a million), that is 3,600 credits; the window caps it at 1,200.
    const gw = await startGateway({ upstreamUrl: upstream.url, credits: 2_000 });
    try {
      const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 100, messages: [{ role: "user", content: '"'.repeat(600_000) }] });
      expect(res.status, await res.text()).toBe(200);
    } finally {
      await gw.stop();
    }
  });
});

describe("the hold covers what a dense prompt costs (a tenant probe, 2026-11-29)", () => {
  test.each([["Content-Length", false], ["chunked", true]] as const)("%s: a prompt of about a token a byte is charged the vendor's whole count, not half of it", async (_framing, chunked) => {
    const gw = await startGateway({ upstreamUrl: upstream.url, credits: 1000 });
    try {
      // Digits and spaces, or emoji: about a token a byte by the vendor's count.
      const content = chunked ? "😀".repeat(15_000) : "7 ".repeat(30_000);
      const body = JSON.stringify({ model: OPENAI_MODEL, max_tokens: 10, messages: [{ role: "user", content }] });
      const bytes = Buffer.byteLength(body);
      const promptTokens = bytes - 200;
      upstream.reply({ kind: "json", body: { id: "chatcmpl-dense", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }], usage: { prompt_tokens: promptTokens, completion_tokens: 10, total_tokens: promptTokens + 10 } } });
      const before = await gw.balanceMicro();
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
        // A stream body is sent chunked (no Content-Length).
        body: chunked ? new Blob([body]).stream() : body,
      });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      expect(before - (await gw.balanceMicro())).toBe(promptTokens * 150 + 10 * 600);
    } finally {
      await gw.stop();
    }
  });
});
