/**
 * The fake upstream's answers (bench/fake-upstream.ts, which keeps each shape it built): each
 * vendor's real stream and body format, usage included. A module of their own so that what measures a part of
 * the gateway without sockets (bench/stream-stage.ts) is fed the very bytes the loopback bench sends.
 */
const enc = new TextEncoder();

const WORDS = ["Switchyard", "forwards", "each", "token", "as", "soon", "as", "it", "arrives,", "counting", "what", "was", "used", "and", "charging", "for", "it."];
const word = (i: number) => (i === 0 ? "" : " ") + WORDS[i % WORDS.length];

export interface Precomputed {
  /** The whole body (non-stream, or a stream sent in one write). */
  whole: Uint8Array;
  /** Stream frames, one write each. */
  frames: Uint8Array[];
  /** frames[contentFrom] is the first content chunk; the think time comes before each content chunk. */
  contentFrom: number;
}

function obfuscation(i: number): string {
  const A = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  let s = "";
  for (let k = 0, n = 1 + ((i * 7) % 12); k < n; k++) s += A[(i * 31 + k * 17) % A.length];
  return s;
}

function openaiUsage(prompt: number, completion: number) {
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 },
  };
}

export function buildOpenAI(stream: boolean, chunks: number, includeUsage: boolean, prompt: number): Precomputed {
  const id = "chatcmpl-BenchFakeUpstream0000000000";
  const created = 1761565012;
  const model = "gpt-4o-mini-2024-07-18";
  const fingerprint = "fp_560af6e559";
  if (!stream) {
    let text = "";
    for (let i = 0; i < chunks; i++) text += word(i);
    const body = {
      id, object: "chat.completion", created, model,
      choices: [{ index: 0, message: { role: "assistant", content: text, refusal: null, annotations: [] }, logprobs: null, finish_reason: "stop" }],
      usage: openaiUsage(prompt, chunks),
      service_tier: "default",
      system_fingerprint: fingerprint,
    };
    return { whole: enc.encode(JSON.stringify(body)), frames: [], contentFrom: 0 };
  }
  let k = 0;
  const frame = (choices: unknown[], usage?: unknown) => {
    const c: Record<string, unknown> = { id, object: "chat.completion.chunk", created, model, service_tier: "default", system_fingerprint: fingerprint, choices };
    // OpenAI sends "usage": null on every chunk only when the client asked for usage.
    if (includeUsage) c.usage = usage ?? null;
    c.obfuscation = obfuscation(k++);
    return `data: ${JSON.stringify(c)}\n\n`;
  };
  const choice = (delta: unknown, finish: string | null = null) => ({ index: 0, delta, logprobs: null, finish_reason: finish });
  const out = [frame([choice({ role: "assistant", content: "", refusal: null })])];
  for (let i = 0; i < chunks; i++) out.push(frame([choice({ content: word(i) })]));
  out.push(frame([choice({}, "stop")]));
  if (includeUsage) out.push(frame([], openaiUsage(prompt, chunks)));
  out.push("data: [DONE]\n\n");
  return { whole: enc.encode(out.join("")), frames: out.map((s) => enc.encode(s)), contentFrom: 1 };
}

export function buildAnthropic(stream: boolean, chunks: number, prompt: number): Precomputed {
  const id = "msg_01BenchFakeUpstream000000";
  const model = "claude-sonnet-4-5-20250929";
  const usage = (output: number) => ({
    input_tokens: prompt,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
    cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
    output_tokens: output,
    service_tier: "standard",
  });
  if (!stream) {
    let text = "";
    for (let i = 0; i < chunks; i++) text += word(i);
    const body = { id, type: "message", role: "assistant", model, content: [{ type: "text", text }], stop_reason: "end_turn", stop_sequence: null, usage: usage(chunks) };
    return { whole: enc.encode(JSON.stringify(body)), frames: [], contentFrom: 0 };
  }
  const ev = (type: string, data: unknown) => `event: ${type}\ndata: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`;
  const out = [
    ev("message_start", { type: "message_start", message: { id, type: "message", role: "assistant", model, content: [], stop_reason: null, stop_sequence: null, usage: usage(1) } }),
    ev("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
    ev("ping", '{"type": "ping"}'),
  ];
  for (let i = 0; i < chunks; i++) out.push(ev("content_block_delta", { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: word(i) } }));
  out.push(
    ev("content_block_stop", { type: "content_block_stop", index: 0 }),
    ev("message_delta", {
      type: "message_delta",
      delta: { stop_reason: "end_turn", stop_sequence: null },
      usage: { input_tokens: prompt, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: chunks },
    }),
    ev("message_stop", { type: "message_stop" }),
  );
  return { whole: enc.encode(out.join("")), frames: out.map((s) => enc.encode(s)), contentFrom: 3 };
}
