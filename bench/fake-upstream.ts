export {};
/**
 * The bench's upstream: both vendors' wire formats from precomputed bytes, no think time.
 * `max_tokens` sets how many chunks a stream has; `bench_delay_ms` (a body field) spaces them out.
 * GET /__stats reports streams still open, so the soak can check nothing leaked.
 */
const enc = new TextEncoder();
const oaChunk = (i: number) => `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"tok${i} "},"logprobs":null,"finish_reason":null}],"usage":null}\n\n`;
const oaTail = (n: number) => `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}\n\ndata: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":${n},"total_tokens":${12 + n}}}\n\ndata: [DONE]\n\n`;
const anHead = `event: message_start\ndata: {"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}\n\nevent: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n`;
const anChunk = (i: number) => `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"tok${i} "}}\n\n`;
const anTail = (n: number) => `event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\nevent: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":${n}}}\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n`;
const oaBody = JSON.stringify({ id: "chatcmpl-bench", object: "chat.completion", created: 1, model: "m", choices: [{ index: 0, message: { role: "assistant", content: "Hello from the bench upstream." }, logprobs: null, finish_reason: "stop" }], usage: { prompt_tokens: 12, completion_tokens: 6, total_tokens: 18 } });
const anBody = JSON.stringify({ id: "msg_bench", type: "message", role: "assistant", model: "m", content: [{ type: "text", text: "Hello from the bench upstream." }], stop_reason: "end_turn", stop_sequence: null, usage: { input_tokens: 12, output_tokens: 6 } });

const cache = new Map<string, Uint8Array[]>();
function frames(anthropic: boolean, n: number): Uint8Array[] {
  const key = `${anthropic}:${n}`;
  let out = cache.get(key);
  if (!out) {
    out = anthropic
      ? [enc.encode(anHead), ...Array.from({ length: n }, (_, i) => enc.encode(anChunk(i))), enc.encode(anTail(n))]
      : [...Array.from({ length: n }, (_, i) => enc.encode(oaChunk(i))), enc.encode(oaTail(n))];
    cache.set(key, out);
  }
  return out;
}

let open = 0;
const server = Bun.serve({
  port: Number(process.env.PORT ?? 0),
  hostname: "127.0.0.1",
  idleTimeout: 0,
  async fetch(req) {
    const url = new URL(req.url);
    if (url.pathname === "/__stats") return Response.json({ open });
    const anthropic = url.pathname === "/v1/messages";
    const body = (await req.json()) as { stream?: boolean; max_tokens?: number; max_completion_tokens?: number; bench_delay_ms?: number };
    if (!body.stream) return new Response(anthropic ? anBody : oaBody, { headers: { "content-type": "application/json" } });
    const n = Math.min(2000, Math.max(1, Number(body.max_tokens ?? body.max_completion_tokens ?? 20)));
    const list = frames(anthropic, n);
    // In the body, so that it reaches the upstream through the gateway too (unknown fields pass through).
    const delay = Number(body.bench_delay_ms ?? 0);
    const headers = { "content-type": "text/event-stream" };
    if (delay === 0) return new Response(Buffer.concat(list), { headers });
    open += 1;
    let i = 0;
    let closed = false;
    const done = () => {
      if (!closed) {
        closed = true;
        open -= 1;
      }
    };
    return new Response(
      new ReadableStream({
        async pull(controller) {
          if (i > 0) await Bun.sleep(delay);
          if (closed) return;
          controller.enqueue(list[i++]!);
          if (i === list.length) {
            done();
            controller.close();
          }
        },
        cancel: done,
      }),
      { headers },
    );
  },
});
console.log(`READY ${server.port}`);
