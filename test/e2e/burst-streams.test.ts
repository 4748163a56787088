import { Database } from "bun:sqlite";
import { describe, expect, test } from "bun:test";
import { READ_SLICE_BYTES } from "../../src/transport/sliced-reader.ts";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, ANTHROPIC_PRICING, leaveAfter, post, sseFrames, useGateway } from "../helpers/gateway.ts";

/*
 * A vendor, a cached answer or a hostile upstream can send a long stream's frames in one write:
 * the gateway reads it in reads of up to ~512 KB and hands them to the pipeline in slices
 * (transport/sliced-reader.ts), one a turn of the event loop. Through the slices the client gets
 * every frame in order, relayed and translated, and is charged what the vendor reported; one
 * that leaves partway is charged what was relayed, as any plain stream a client leaves.
 */

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, credits: 10_000 }));

const FRAMES = 8_192;
const PROMPT = 21;
const ev = (type: string, data: unknown) => `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
const word = (i: number) => `w${i} `;

/** An Anthropic stream of FRAMES text deltas, as one string (the fake writes a chunk in one go). */
function burst(): string {
  const out = [
    ev("message_start", { type: "message_start", message: { id: "msg_burst", type: "message", role: "assistant", model: "claude-sonnet-4-5", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: PROMPT, output_tokens: 1 } } }),
    ev("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
  ];
  for (let i = 0; i < FRAMES; i++) out.push(ev("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: word(i) } }));
  out.push(
    ev("content_block_stop", { type: "content_block_stop", index: 0 }),
    ev("message_delta", { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: FRAMES } }),
    ev("message_stop", { type: "message_stop" }),
  );
  return out.join("");
}
const whole = Array.from({ length: FRAMES }, (_, i) => word(i)).join("");
const PRICED = PROMPT * ANTHROPIC_PRICING.input_per_mtok + FRAMES * ANTHROPIC_PRICING.output_per_mtok;

function lastRecord(): { prompt_tokens: number; completion_tokens: number; cost_micro: number; estimated: number; status: string } {
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    return db.query<any, []>("SELECT prompt_tokens, completion_tokens, cost_micro, estimated, status FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
  } finally {
    db.close();
  }
}

describe("a stream whose frames come in one burst", () => {
  test("the burst is many slices long", () => {
    expect(Buffer.byteLength(burst())).toBeGreaterThan(8 * READ_SLICE_BYTES);
  });

  test("relayed (Anthropic client): every frame, in order, byte for byte; charged the vendor's usage", async () => {
    const body = burst();
    upstream.reply({ kind: "sse", chunks: [body] });
    const before = await gw.balanceMicro();
    const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 20_000, stream: true, messages: [{ role: "user", content: "Go." }] });
    expect(res.status).toBe(200);
    const frames = sseFrames(await res.text()).filter((f) => f.event !== "ping");
    const deltas = frames.filter((f) => f.event === "content_block_delta").map((f) => JSON.parse(f.data).delta.text as string);
    expect(deltas.length).toBe(FRAMES);
    expect(deltas.join("")).toBe(whole);
    expect(frames.at(-1)!.event).toBe("message_stop");
    await gw.app.services.settled();
    expect(before - (await gw.balanceMicro())).toBe(PRICED);
    expect(lastRecord()).toMatchObject({ prompt_tokens: PROMPT, completion_tokens: FRAMES, estimated: 0, status: "ok" });
  });

  test("translated (OpenAI client): every word, in order, then the usage and [DONE]; charged the vendor's usage", async () => {
    upstream.reply({ kind: "sse", chunks: [burst()] });
    const before = await gw.balanceMicro();
    const res = await post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, max_tokens: 20_000, stream: true, stream_options: { include_usage: true }, messages: [{ role: "user", content: "Go." }] });
    expect(res.status).toBe(200);
    const frames = sseFrames(await res.text());
    expect(frames.at(-1)!.data).toBe("[DONE]");
    const chunks = frames.slice(0, -1).map((f) => JSON.parse(f.data));
    expect(chunks.map((c) => c.choices?.[0]?.delta?.content ?? "").join("")).toBe(whole);
    expect(chunks.at(-1).usage).toMatchObject({ prompt_tokens: PROMPT, completion_tokens: FRAMES });
    await gw.app.services.settled();
    expect(before - (await gw.balanceMicro())).toBe(PRICED);
  });

  test("a client that leaves after the first frames is charged what was relayed, as any plain stream a client leaves", async () => {
    upstream.reply({ kind: "sse", chunks: [burst()] });
    const before = await gw.balanceMicro();
    const leave = new AbortController();
    const res = await post(gw, "/v1/messages", { model: ANTHROPIC_MODEL, max_tokens: 20_000, stream: true, messages: [{ role: "user", content: "Go." }] }, {}, leave.signal);
    expect(res.status).toBe(200);
    await leaveAfter(gw, res, leave, "w100 ");
    const charged = before - (await gw.balanceMicro());
    const record = lastRecord();
    // At least the 101 words the client read, at most the whole; the record says the same.
    expect(record.status).toBe("cancelled");
    expect(record.completion_tokens).toBeGreaterThanOrEqual(101);
    expect(record.completion_tokens).toBeLessThanOrEqual(FRAMES);
    expect(charged).toBe(record.cost_micro);
    expect(charged).toBeLessThanOrEqual(PRICED);
  });

  test("ten bursts at once: each client gets its own whole answer", async () => {
    for (let i = 0; i < 10; i++) upstream.reply({ kind: "sse", chunks: [burst()] });
    const texts = await Promise.all(Array.from({ length: 10 }, () =>
      post(gw, "/v1/chat/completions", { model: ANTHROPIC_MODEL, max_tokens: 20_000, stream: true, messages: [{ role: "user", content: "Go." }] }).then(async (r) => `${r.status} ${await r.text()}`)));
    for (const text of texts) {
      if (!text.startsWith("200 ")) throw new Error(text.slice(0, 500));
      const frames = sseFrames(text.slice(4));
      expect(frames.at(-1)!.data).toBe("[DONE]");
      expect(frames.slice(0, -1).map((f) => JSON.parse(f.data).choices?.[0]?.delta?.content ?? "").join("")).toBe(whole);
    }
  }, 30_000);
});
