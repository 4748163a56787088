import { describe, expect, test } from "bun:test";
import Anthropic from "@anthropic-ai/sdk";
import { drawPng } from "../../src/providers/simulated/draw-png.ts";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { useGateway, FREE_MODEL, IMAGE_CHAT_MODEL, IMAGES_API_MODEL, OPENAI_MODEL, post, sseFrames } from "../helpers/gateway.ts";

const upstream = useFakeUpstream();
/** gpt-image-1 as the built-in catalogue prices it: by tokens (an image's output tokens at 40,000 credits per million, cached text input at 1,250), no per-image price. */
const TOKEN_PRICED_IMAGES = "test/gpt-image";
/** An image chat model configured to be held for (and to give) three images a request. */
const THREE_IMAGES_MODEL = "test/image-chat-3";
/** An image chat model priced by its tokens only (its vendor counts images as output tokens). */
const TOKEN_PRICED_CHAT = "test/image-chat-tokens";
const gw = useGateway(() => ({
  upstreamUrl: upstream.url,
  // Room for several token-priced images, each held for its answer cap (8,192 tokens at 40,000 a million).
  credits: 5_000,
  maxImageBytes: 64 * 1024,
  extraModels: [
    { id: TOKEN_PRICED_IMAGES, provider: "fake-openai", upstream_model: "gpt-image-1", upstream_api: "images", category: "image", context_length: 32_000, pricing: { input_per_mtok: 5_000, output_per_mtok: 40_000, cache_read_per_mtok: 1_250, per_image: 0 } },
    { id: TOKEN_PRICED_CHAT, provider: "fake-openai", upstream_model: "flux-chat", category: "image", context_length: 32000, pricing: { input_per_mtok: 1_000, output_per_mtok: 1_000, per_image: 0 } },
    { id: THREE_IMAGES_MODEL, provider: "fake-openai", upstream_model: "flux-chat", category: "image", context_length: 32000, images_per_request: 3, pricing: { input_per_mtok: 100, output_per_mtok: 100, per_image: 0.25 } },
  ],
}));

const PNG = drawPng("a lighthouse at dusk");
const PNG_B64 = Buffer.from(PNG).toString("base64");
const JPEG_HEAD = Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 16, 0x4a, 0x46, 0x49, 0x46, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 0xff, 0xd9]);
const question = [{ role: "user", content: "Draw a lighthouse at dusk" }];

/** The markdown image in answer text, decoded back to bytes. */
function decodeImage(text: string): { type: string; bytes: Buffer } {
  const match = text.match(/!\[image\]\(data:(image\/[a-z]+);base64,([A-Za-z0-9+/=]+)\)/);
  expect(match).not.toBeNull();
  return { type: match![1]!, bytes: Buffer.from(match![2]!, "base64") };
}

function expectPng(text: string) {
  const { type, bytes } = decodeImage(text);
  expect(type).toBe("image/png");
  expect([...bytes.subarray(0, 8)]).toEqual([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  expect(bytes.subarray(12, 16).toString("ascii")).toBe("IHDR");
}

const streamedText = {
  openai: (body: string) => sseFrames(body).filter((f) => f.data !== "[DONE]").map((f) => JSON.parse(f.data).choices?.[0]?.delta?.content ?? "").join(""),
  anthropic: (body: string) => sseFrames(body).filter((f) => f.event === "content_block_delta").map((f) => JSON.parse(f.data).delta.text ?? "").join(""),
};

const imageUrl = { type: "image_url", image_url: { url: `data:image/png;base64,${PNG_B64}` } };
const chatChunk = (delta: unknown, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "flux-chat", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;

/** Queues the upstream's answer for one request; the images API never streams, a chat upstream does when asked. */
const upstreamKinds = [
  ["images API", IMAGES_API_MODEL, (_stream: boolean) => upstream.reply({ kind: "json", body: { created: 1, data: [{ b64_json: PNG_B64, revised_prompt: "a lighthouse" }] } })],
  ["chat with images[]", IMAGE_CHAT_MODEL, (stream: boolean) =>
    stream
      ? upstream.reply({ kind: "sse", chunks: [chatChunk({ role: "assistant", content: "Here it is." }), chatChunk({ images: [imageUrl] }), chatChunk({}, "stop"), `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "flux-chat", choices: [], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } })}\n\n`, "data: [DONE]\n\n"] })
      : upstream.reply({ kind: "json", body: { id: "c", object: "chat.completion", created: 1, model: "flux-chat", choices: [{ index: 0, message: { role: "assistant", content: "Here it is.", images: [imageUrl] }, finish_reason: "stop" }], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } } })],
] as const;

describe.each(upstreamKinds)("image model over the %s", (kind, model, queue) => {
  test("chat completions, non-stream", async () => {
    queue(false);
    const res = await post(gw, "/v1/chat/completions", { model, messages: question });
    expect(res.status).toBe(200);
    const body = (await res.json()) as any;
    expectPng(body.choices[0].message.content);
    if (kind === "chat with images[]") expect(body.choices[0].message.content.startsWith("Here it is.\n\n![image](")).toBe(true);
    expect(body.choices[0].message.images).toBeUndefined();
  });

  test("chat completions, stream", async () => {
    queue(true);
    const res = await post(gw, "/v1/chat/completions", { model, messages: question, stream: true });
    const text = await res.text();
    expect(sseFrames(text).at(-1)!.data).toBe("[DONE]");
    expectPng(streamedText.openai(text));
  });

  test("messages, non-stream", async () => {
    queue(false);
    const body = (await (await post(gw, "/v1/messages", { model, max_tokens: 100, messages: question })).json()) as any;
    expect(body.content.length).toBe(1);
    expect(body.content[0].type).toBe("text");
    expectPng(body.content[0].text);
    expect(body.stop_reason).toBe("end_turn");
  });

  test("messages, stream", async () => {
    queue(true);
    const text = await (await post(gw, "/v1/messages", { model, max_tokens: 100, messages: question, stream: true })).text();
    expect(sseFrames(text).at(-1)!.event).toBe("message_stop");
    expectPng(streamedText.anthropic(text));
  });
});

describe("what the images API receives and what it costs", () => {
  test("the prompt is the last user message; b64_json is asked for; per-image price charged", async () => {
    const before = await gw.balanceMicro();
    upstream.reply({ kind: "json", body: { created: 1, data: [{ b64_json: PNG_B64 }] } });
    await post(gw, "/v1/chat/completions", { model: IMAGES_API_MODEL, messages: [{ role: "user", content: "a cat" }, { role: "assistant", content: "ok" }, { role: "user", content: "now a dog" }] });
    const sent = upstream.requests[0]!;
    expect(sent.path).toBe("/v1/images/generations");
    expect(sent.body).toEqual({ model: "dall-e-3", prompt: "now a dog", n: 1, response_format: "b64_json" });
    expect(before - (await gw.balanceMicro())).toBe(500_000);
  });

  test("the real format of the bytes wins over any declared type (JPEG)", async () => {
    upstream.reply({ kind: "json", body: { created: 1, data: [{ b64_json: JPEG_HEAD.toString("base64") }] } });
    const body = (await (await post(gw, "/v1/chat/completions", { model: IMAGES_API_MODEL, messages: question })).json()) as any;
    expect(decodeImage(body.choices[0].message.content).type).toBe("image/jpeg");
  });
});

describe("images behind URLs", () => {
  test("an image URL on the provider's own host is fetched and inlined", async () => {
    upstream.reply({ kind: "json", body: { id: "c", object: "chat.completion", created: 1, model: "flux-chat", choices: [{ index: 0, message: { role: "assistant", content: "", images: [{ type: "image_url", image_url: { url: `${upstream.url}/files/out.png` } }] }, finish_reason: "stop" }], usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 } } });
    upstream.reply({ kind: "bytes", headers: { "content-type": "image/png" }, body: PNG });
    const body = (await (await post(gw, "/v1/chat/completions", { model: IMAGE_CHAT_MODEL, messages: question })).json()) as any;
    expectPng(body.choices[0].message.content);
    expect(upstream.requests[1]).toMatchObject({ method: "GET", path: "/files/out.png" });
  });

  test("an image URL on any other host is refused, never fetched", async () => {
    upstream.reply({ kind: "json", body: { id: "c", object: "chat.completion", created: 1, model: "flux-chat", choices: [{ index: 0, message: { role: "assistant", content: "", images: [{ image_url: { url: "http://169.254.169.254/latest/meta-data" } }] }, finish_reason: "stop" }] } });
    const res = await post(gw, "/v1/chat/completions", { model: IMAGE_CHAT_MODEL, messages: question });
    expect(res.status).toBe(502);
    expect(upstream.requests.length).toBe(1);
  });

  test("a streamed image is inlined in order with the text, then the finish frames", async () => {
    const chunk = (delta: unknown, finish: string | null = null) => `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "flux-chat", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    upstream.reply({ kind: "sse", chunks: [chunk({ role: "assistant", content: "Before. " }), chunk({ images: [{ type: "image_url", image_url: { url: `data:image/png;base64,${PNG_B64}` } }] }), chunk({ content: " After." }), chunk({}, "stop"), "data: [DONE]\n\n"] });
    const text = streamedText.openai(await (await post(gw, "/v1/chat/completions", { model: IMAGE_CHAT_MODEL, messages: question, stream: true })).text());
    expect(text.startsWith("Before. \n\n![image](data:image/png;base64,")).toBe(true);
    expect(text.endsWith(") After.")).toBe(true);
    expectPng(text);
  });
});

describe("oversize images", () => {
  const big = Buffer.concat([PNG.subarray(0, 16), Buffer.alloc(100 * 1024)]).toString("base64");

  test("non-stream: clean 502, nothing charged", async () => {
    const before = await gw.balanceMicro();
    upstream.reply({ kind: "json", body: { created: 1, data: [{ b64_json: big }] } });
    const res = await post(gw, "/v1/messages", { model: IMAGES_API_MODEL, max_tokens: 10, messages: question });
    expect(res.status).toBe(502);
    expect(((await res.json()) as any).error.message).toMatch(/larger/);
    expect(await gw.balanceMicro()).toBe(before);
  });

  test("stream: error frame, nothing charged", async () => {
    const before = await gw.balanceMicro();
    const chunk = (delta: unknown) => `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`;
    upstream.reply({ kind: "sse", chunks: [chunk({ content: "Here: " }), chunk({ images: [{ image_url: { url: `data:image/png;base64,${big}` } }] })] });
    const frames = sseFrames(await (await post(gw, "/v1/chat/completions", { model: IMAGE_CHAT_MODEL, messages: question, stream: true })).text());
    expect(JSON.parse(frames.at(-1)!.data).error.message).toMatch(/larger/);
    expect(await gw.balanceMicro()).toBe(before);
  });
});

describe("image input stays refused", () => {
  test("both formats → 400", async () => {
    const openai = await post(gw, "/v1/chat/completions", { model: IMAGE_CHAT_MODEL, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: `data:image/png;base64,${PNG_B64}` } }] }] });
    expect(openai.status).toBe(400);
    const anthropic = await post(gw, "/v1/messages", { model: IMAGE_CHAT_MODEL, max_tokens: 5, messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: PNG_B64 } }] }] });
    expect(anthropic.status).toBe(400);
    expect(upstream.requests.length).toBe(0);
  });
});

describe("context length", () => {
  const long = "lorem ipsum dolor sit amet ".repeat(1200); // ~6,000 tokens

  test("prompt plus max_tokens over context_length → 400 naming both numbers, no upstream call, no charge", async () => {
    const res = await post(gw, "/v1/chat/completions", { model: FREE_MODEL, max_tokens: 4000, messages: [{ role: "user", content: long }] });
    expect(res.status).toBe(400);
    const error = ((await res.json()) as any).error;
    // OpenAI's own wording and code, which agent frameworks match to compact the conversation.
    expect(error.code).toBe("context_length_exceeded");
    expect(error.param).toBe("messages");
    expect(error.type).toBe("invalid_request_error");
    expect(error.message).toMatch(/^This model's maximum context length is 8192 tokens\. However, you requested \d+ tokens \(\d+ in the messages, 4000 in the completion\)\./);
    expect(upstream.requests.length).toBe(0);
  });

  test("without max_tokens the answer gets the room that is left", async () => {
    const res = await post(gw, "/v1/chat/completions", { model: FREE_MODEL, messages: [{ role: "user", content: long }] });
    expect(res.status).toBe(200);
    const sent = upstream.requests[0]!.body.max_tokens;
    expect(sent).toBeGreaterThan(0);
    expect(sent).toBeLessThan(8192 - 5000);
  });

  test("a fallback with room takes over from a model without", async () => {
    const res = await post(gw, "/v1/chat/completions", { models: [FREE_MODEL, OPENAI_MODEL], max_tokens: 4000, messages: [{ role: "user", content: long }] });
    expect(res.status).toBe(200);
    expect(((await res.json()) as any).model).toBe(OPENAI_MODEL);
  });
});

describe("catalogue", () => {
  test("free models are listed with credits_per_msg 0, image models with their category", async () => {
    const list = (await (await fetch(`${gw.url}/v1/models`, { headers: { "x-api-key": gw.key } })).json()) as any;
    expect(list.data.find((m: any) => m.id === FREE_MODEL).credits_per_msg).toBe(0);
    expect(list.data.find((m: any) => m.id === IMAGES_API_MODEL).category).toBe("image");
  });

  test("the Anthropic SDK's models.list() gets Anthropic's list shape", async () => {
    const client = new Anthropic({ baseURL: gw.url, apiKey: gw.key, maxRetries: 0 });
    const ids: string[] = [];
    for await (const model of client.models.list({ limit: 2 })) {
      expect(model.type).toBe("model");
      expect(typeof model.display_name).toBe("string");
      expect(Number.isNaN(Date.parse(model.created_at))).toBe(false);
      ids.push(model.id);
    }
    const spec = (await (await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${gw.key}` } })).json()) as any;
    expect(ids).toEqual(spec.data.map((m: any) => m.id));
    const page = (await (await fetch(`${gw.url}/v1/models?limit=2`, { headers: { "x-api-key": gw.key, "anthropic-version": "2023-06-01" } })).json()) as any;
    expect(page).toMatchObject({ has_more: true, first_id: spec.data[0].id, last_id: spec.data[1].id });
    // Anthropic's range for limit (1 to 1000): outside it, a 400 in Anthropic's shape the SDK reads.
    for (const limit of [0, 1001]) {
      const refused = await client.models.list({ limit }).catch((e) => e);
      expect([limit, refused]).toEqual([limit, expect.any(Anthropic.BadRequestError)]);
      expect(refused.error.error.message).toContain("limit");
    }
    // A cursor that names no model: an empty last page, whichever way.
    for (const cursor of ["after_id", "before_id"]) {
      const stray = (await (await fetch(`${gw.url}/v1/models?${cursor}=no-such-model`, { headers: { "x-api-key": gw.key, "anthropic-version": "2023-06-01" } })).json()) as any;
      expect([cursor, stray.data, stray.has_more]).toEqual([cursor, [], false]);
    }
  });
});

describe("n on image models", () => {
  test("n > 1 is a 400 before anything is held or sent: one answer's images are what an image model gives", async () => {
    for (const model of [IMAGE_CHAT_MODEL, IMAGES_API_MODEL]) {
      const before = upstream.requests.length;
      const res = await post(gw, "/v1/chat/completions", { model, n: 2, messages: question });
      expect(res.status).toBe(400);
      const body = (await res.json()) as { error: { type: string; message: string } };
      expect(body.error.type).toBe("invalid_request_error");
      expect(body.error.message).toBe(`n must be 1 for the image model "${model}": it makes one answer per request.`);
      expect(upstream.requests.length).toBe(before);
    }
    // Text models keep n.
    const text = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, n: 2, messages: question });
    expect(text.status).toBe(200);
    // An image model among the fallbacks is asked for one answer when it is reached.
    upstream.reply({ kind: "json", status: 500, body: { error: { message: "down", type: "server_error" } } });
    const fellBack = await post(gw, "/v1/chat/completions", { models: [OPENAI_MODEL, IMAGE_CHAT_MODEL], n: 2, messages: question });
    expect(fellBack.status).toBe(200);
    expect(upstream.requests.at(-1)!.body.model).toBe("flux-chat");
    expect(upstream.requests.at(-1)!.body.n).toBeUndefined();
  });
});

test("an image priced by its tokens is charged all of them whatever max_tokens says (the images API takes no answer limit)", async () => {
  for (const [path, maxTokens] of [["/v1/chat/completions", 1], ["/v1/messages", 1], ["/v1/chat/completions", undefined]] as const) {
    // gpt-image-1's high-quality 1024×1024 image: 4,160 output tokens.
    upstream.reply({ kind: "json", body: { created: 1, data: [{ b64_json: PNG_B64 }], usage: { input_tokens: 12, output_tokens: 4_160, input_tokens_details: { text_tokens: 12, image_tokens: 0 } } } });
    const before = await gw.balanceMicro();
    const body = path === "/v1/messages" ? { model: TOKEN_PRICED_IMAGES, max_tokens: maxTokens, messages: question } : { model: TOKEN_PRICED_IMAGES, messages: question, ...(maxTokens ? { max_tokens: maxTokens } : {}) };
    const res = await post(gw, path, body);
    expect([path, maxTokens, res.status]).toEqual([path, maxTokens, 200]);
    await res.arrayBuffer();
    expect([path, maxTokens, before - (await gw.balanceMicro())]).toEqual([path, maxTokens, 12 * 5_000 + 4_160 * 40_000]);
  }
});

test("an image prompt's cached text tokens are charged at the cache-read price, never more than the prompt", async () => {
  for (const [cached, reads] of [[1_200, 1_200], [5_000, 2_000]] as const) {
    upstream.reply({ kind: "json", body: { created: 1, data: [{ b64_json: PNG_B64 }], usage: { input_tokens: 2_000, output_tokens: 4_160, input_tokens_details: { text_tokens: 2_000, image_tokens: 0, cached_tokens: cached } } } });
    const before = await gw.balanceMicro();
    // A prompt long enough to hold its 2,000 reported tokens (a hold counts at most a token a byte).
    const res = await post(gw, "/v1/chat/completions", { model: TOKEN_PRICED_IMAGES, messages: [{ role: "user", content: "Draw a lighthouse at dusk. ".repeat(100) }] });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    expect([cached, before - (await gw.balanceMicro())]).toEqual([cached, (2_000 - reads) * 5_000 + reads * 1_250 + 4_160 * 40_000]);
  }
});


describe("more images than the request was held for (a hostile-tenant probe got 10 for the price of 1)", () => {
  const lastRecord = async () => (await gw.app.services.settled(), gw.db.query<{ images: number; cost_micro: number; status: string }, []>("SELECT images, cost_micro, status FROM usage_records ORDER BY id DESC LIMIT 1").get()!);
  const threeImages = { id: "c", object: "chat.completion", created: 1, model: "flux-chat", choices: [{ index: 0, message: { role: "assistant", content: "Three.", images: [imageUrl, imageUrl, imageUrl] }, finish_reason: "stop" }], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } };
  const streamedThree = [chatChunk({ role: "assistant", content: "Three." }), chatChunk({ images: [imageUrl] }), chatChunk({ images: [imageUrl] }), chatChunk({ images: [imageUrl] }), chatChunk({}, "stop"), `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "flux-chat", choices: [], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } })}\n\n`, "data: [DONE]\n\n"];
  const count = (text: string) => text.split("![image](").length - 1;

  test("non-stream: the first image goes out and is charged; the others are dropped", async () => {
    const before = await gw.balanceMicro();
    upstream.reply({ kind: "json", body: threeImages });
    const res = await post(gw, "/v1/chat/completions", { model: IMAGE_CHAT_MODEL, messages: question });
    expect(res.status).toBe(200);
    expect(count(((await res.json()) as any).choices[0].message.content)).toBe(1);
    // 0.25 for the image, 10 tokens at 100 credits per million.
    expect(await lastRecord()).toMatchObject({ images: 1, cost_micro: 251_000, status: "ok" });
    expect(before - (await gw.balanceMicro())).toBe(251_000);
  });

  test("stream: the first image goes out, the others are taken out of their frames (never fetched), the answer goes on to its end and usage", async () => {
    const fetchedBefore = upstream.requests.length;
    upstream.reply({ kind: "sse", chunks: streamedThree });
    const res = await post(gw, "/v1/chat/completions", { model: IMAGE_CHAT_MODEL, messages: question, stream: true, stream_options: { include_usage: true } });
    const text = await res.text();
    expect(count(streamedText.openai(text))).toBe(1);
    const frames = sseFrames(text);
    expect(frames.at(-1)!.data).toBe("[DONE]");
    // The usage the vendor reported reaches the client, and prices the answer with its one image.
    expect(JSON.parse(frames.at(-2)!.data).usage).toMatchObject({ prompt_tokens: 7, completion_tokens: 3 });
    expect(await lastRecord()).toMatchObject({ images: 1, cost_micro: 251_000, status: "ok" });
    expect(upstream.requests.length).toBe(fetchedBefore + 1);
    upstream.reply({ kind: "sse", chunks: streamedThree });
    const messages = await (await post(gw, "/v1/messages", { model: IMAGE_CHAT_MODEL, max_tokens: 100, messages: question, stream: true })).text();
    expect(count(streamedText.anthropic(messages))).toBe(1);
    expect(sseFrames(messages).at(-1)!.event).toBe("message_stop");
    expect(await lastRecord()).toMatchObject({ images: 1, cost_micro: 251_000, status: "ok" });
  });

  test("images behind URLs past the hold are never fetched", async () => {
    const url = (name: string) => ({ type: "image_url", image_url: { url: `${upstream.url}/files/${name}.png` } });
    upstream.reply({ kind: "sse", chunks: [chatChunk({ role: "assistant", content: "Two." }), chatChunk({ images: [url("one"), url("two")] }), chatChunk({}, "stop"), "data: [DONE]\n\n"] });
    upstream.reply({ kind: "bytes", headers: { "content-type": "image/png" }, body: PNG });
    const text = await (await post(gw, "/v1/chat/completions", { model: IMAGE_CHAT_MODEL, messages: question, stream: true })).text();
    expect(count(streamedText.openai(text))).toBe(1);
    expect(upstream.requests.map((r) => r.path)).toEqual(["/v1/chat/completions", "/files/one.png"]);
  });

  test("images under a key written with escapes (`\\u0069mages`) are read, inlined, bounded and charged like any others, never relayed raw", async () => {
    const url = { type: "image_url", image_url: { url: `${upstream.url}/img/secret.png?sig=vendor-secret` } };
    const escaped = chatChunk({ content: " x", images: [url, url] }).replace('"images":', '"\\u0069mages":');
    expect(escaped).toContain("\\u0069mages");
    upstream.reply({ kind: "sse", chunks: [chatChunk({ role: "assistant", content: "Here" }), chatChunk({ content: " it" }), escaped, chatChunk({}, "stop"), `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "flux-chat", choices: [], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } })}\n\n`, "data: [DONE]\n\n"] });
    upstream.reply({ kind: "bytes", headers: { "content-type": "image/png" }, body: PNG });
    const text = await (await post(gw, "/v1/chat/completions", { model: IMAGE_CHAT_MODEL, messages: question, stream: true })).text();
    expect(text).not.toContain("vendor-secret");
    expect(count(streamedText.openai(text))).toBe(1);
    expectPng(streamedText.openai(text));
    expect(await lastRecord()).toMatchObject({ images: 1, cost_micro: 251_000, status: "ok" });
  });

  test("a model priced by its tokens (no per-image price) gives every image, charged by the vendor's counts", async () => {
    upstream.reply({ kind: "sse", chunks: streamedThree });
    const text = await (await post(gw, "/v1/chat/completions", { model: TOKEN_PRICED_CHAT, messages: question, stream: true })).text();
    expect(count(streamedText.openai(text))).toBe(3);
    // 7 in and 3 out at 1,000 credits per million each.
    expect(await lastRecord()).toMatchObject({ images: 3, cost_micro: 10_000, status: "ok" });
  });

  test("a model held for three images a request (images_per_request) gives and charges all three", async () => {
    upstream.reply({ kind: "json", body: threeImages });
    const res = await post(gw, "/v1/chat/completions", { model: THREE_IMAGES_MODEL, messages: question });
    expect(count(((await res.json()) as any).choices[0].message.content)).toBe(3);
    expect(await lastRecord()).toMatchObject({ images: 3, cost_micro: 751_000, status: "ok" });
    upstream.reply({ kind: "sse", chunks: streamedThree });
    const text = await (await post(gw, "/v1/chat/completions", { model: THREE_IMAGES_MODEL, messages: question, stream: true })).text();
    expect(count(streamedText.openai(text))).toBe(3);
    expect(await lastRecord()).toMatchObject({ images: 3, cost_micro: 751_000, status: "ok" });
  });
});
