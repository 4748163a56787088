/**
 * Issue 15: an image the upstream answered with a URL that cannot be downloaded — DNS failure,
 * refused connection, error status, redirect off its origin, timeout, too large, not an image —
 * is a clean 502 (an error frame once a stream has started), moves on to the next model in
 * `models`, and costs nothing.
 */
import { describe, expect, test } from "bun:test";
import { drawPng } from "../../src/providers/simulated/draw-png.ts";
import { answerCostMicro } from "../../src/billing/pricing.ts";
import { useFakeUpstream, type Reply } from "../helpers/fake-upstream.ts";
import { useGateway, IMAGE_CHAT_MODEL, IMAGES_API_MODEL, OPENAI_MODEL, post, sseFrames } from "../helpers/gateway.ts";

const PNG = drawPng("a lighthouse at dusk");
const MAX_IMAGE_BYTES = 64 * 1024;
const OPENAI_PRICING = { input_per_mtok: 150, output_per_mtok: 600 };

/**
 * A port nothing listens on: connections to it are refused. Taken when first asked for, once the
 * fake upstream and the gateway listen: taken before them, the freed port was once handed to the
 * fake upstream, which answered 404 (a CI run).
 */
let refusingPort: number | undefined;
const closedPort = (): number => {
  if (refusingPort === undefined) {
    const server = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    refusingPort = server.port;
    server.stop(true);
  }
  return refusingPort;
};

const upstream = useFakeUpstream();
/**
 * The network under the gateway: image URLs whose path names a network failure fail as that
 * failure does (a name that does not resolve — as the resolver answers it, without asking a real
 * one, whose answer this sandbox may never give; a closed port); all else goes on.
 */
const network = (url: string, init: RequestInit) => {
  if (url.endsWith("/files/dns.png")) return Promise.reject(Object.assign(new Error("getaddrinfo ENOTFOUND images.switchyard-test.invalid"), { code: "ENOTFOUND" }));
  if (url.endsWith("/files/no-answer.png")) return new Promise<Response>(() => {}); // a lookup that never comes back
  if (url.endsWith("/files/refused.png")) return fetch(`http://127.0.0.1:${closedPort()}/out.png`, init);
  return fetch(url, init);
};
const gw = useGateway(() => ({ upstreamUrl: upstream.url, maxImageBytes: MAX_IMAGE_BYTES, imageFetchTimeoutMs: 250, fetch: network }));

interface Failure {
  kind: string;
  /** The image's path on the provider's host. */
  file: string;
  /** What the image URL answers; none when the request never reaches the fake upstream. */
  serve?: () => Reply[];
  message: string;
  errorType: "upstream_error" | "timeout_error";
}

const bigPng = Buffer.concat([PNG, Buffer.alloc(MAX_IMAGE_BYTES)]);
const FAILURES: Failure[] = [
  { kind: "DNS failure", file: "dns.png", message: "The upstream provider's image could not be downloaded.", errorType: "upstream_error" },
  { kind: "connection refused", file: "refused.png", message: "The upstream provider's image could not be downloaded.", errorType: "upstream_error" },
  {
    kind: "HTTP error status",
    file: "gone.png",
    serve: () => [{ kind: "text", status: 404, body: "Not Found: /srv/images/gone.png on images-7.internal" }],
    message: "The upstream provider's image could not be downloaded (status 404).",
    errorType: "upstream_error",
  },
  {
    kind: "redirect to another host",
    file: "moved.png",
    // Another host name for the same server: were the redirect followed, the fake would see the request.
    serve: () => [{ kind: "text", status: 302, headers: { location: `http://localhost:${new URL(upstream.url).port}/files/out.png` }, body: "" }],
    message: "The upstream provider's image URL redirects to another host, which the gateway does not follow.",
    errorType: "upstream_error",
  },
  {
    kind: "redirect to the metadata service",
    file: "meta.png",
    serve: () => [{ kind: "text", status: 301, headers: { location: "http://169.254.169.254/latest/meta-data/iam/security-credentials/" }, body: "" }],
    message: "The upstream provider's image URL redirects to another host, which the gateway does not follow.",
    errorType: "upstream_error",
  },
  {
    kind: "more than 3 redirects within the origin",
    file: "loop.png",
    serve: () => [302, 302, 302, 302].map((status, i): Reply => ({ kind: "text", status, headers: { location: `/files/loop-${i}.png` }, body: "" })),
    message: "The upstream provider's image URL redirects more than 3 times, which the gateway does not follow.",
    errorType: "upstream_error",
  },
  { kind: "timeout", file: "slow.png", serve: () => [{ kind: "hang" }], message: "The upstream provider's image did not arrive in time.", errorType: "timeout_error" },
  // A transport that does not give up when told to (a hung name lookup): the timeout holds anyway.
  { kind: "timeout, the transport ignoring the abort", file: "no-answer.png", message: "The upstream provider's image did not arrive in time.", errorType: "timeout_error" },
  {
    kind: "too large (Content-Length)",
    file: "big.png",
    serve: () => [{ kind: "bytes", headers: { "content-type": "image/png" }, body: bigPng }],
    message: "The upstream provider made an image larger than the gateway accepts.",
    errorType: "upstream_error",
  },
  {
    kind: "too large (chunked, no length)",
    file: "big-chunked.png",
    serve: () => [{ kind: "sse", headers: { "content-type": "image/png" }, chunks: [PNG, new Uint8Array(MAX_IMAGE_BYTES)] }],
    message: "The upstream provider made an image larger than the gateway accepts.",
    errorType: "upstream_error",
  },
  {
    kind: "wrong content type (an HTML page)",
    file: "page.png",
    serve: () => [{ kind: "text", headers: { "content-type": "text/html" }, body: "<html><body>Sign in at https://sso.internal/</body></html>" }],
    message: "The upstream provider sent an image the gateway could not use.",
    errorType: "upstream_error",
  },
  {
    kind: "not an image (bytes of something else)",
    file: "blob.png",
    serve: () => [{ kind: "bytes", body: new TextEncoder().encode("%PDF-1.7 not an image") }],
    message: "The upstream provider sent an image the gateway could not use.",
    errorType: "upstream_error",
  },
];

const question = [{ role: "user", content: "Draw a lighthouse at dusk" }];
const imageUrl = (f: Failure) => `${upstream.url}/files/${f.file}`;

/** The images API answers with the image's URL, then the URL answers as the failure says. */
function queueImagesApi(f: Failure) {
  upstream.reply({ kind: "json", body: { created: 1, data: [{ url: imageUrl(f) }] } });
  for (const r of f.serve?.() ?? []) upstream.reply(r);
}

/** A streamed chat answer whose second frame carries the image URL. */
function queueChatStream(f: Failure) {
  const chunk = (delta: unknown, finish: string | null = null) =>
    `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "flux-chat", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  upstream.reply({ kind: "sse", chunks: [chunk({ role: "assistant", content: "Here it is: " }), chunk({ images: [{ type: "image_url", image_url: { url: imageUrl(f) } }] }), chunk({}, "stop"), "data: [DONE]\n\n"] });
  for (const r of f.serve?.() ?? []) upstream.reply(r);
}

/** Nothing of the upstream's address, paths or words reaches the client. */
function expectNothingInternal(text: string) {
  for (const leak of [upstream.url, "127.0.0.1", "localhost", "169.254", "switchyard-test.invalid", "/files/", "internal", "Not Found"]) expect(text).not.toContain(leak);
}

describe.each(FAILURES.map((f) => [f.kind, f] as const))("%s", (_kind, f) => {
  test("one model, non-stream, chat completions → 502 with a clean message, nothing charged", async () => {
    const before = await gw.balanceMicro();
    queueImagesApi(f);
    const res = await post(gw, "/v1/chat/completions", { model: IMAGES_API_MODEL, messages: question });
    expect(res.status).toBe(502);
    const text = await res.text();
    expectNothingInternal(text);
    expect(JSON.parse(text).error).toMatchObject({ message: f.message, type: f.errorType });
    expect(await gw.balanceMicro()).toBe(before);
    // A redirect off the origin is never followed: the image URL is the last request the fake saw.
    expect(upstream.requests.at(-1)!.path).toBe(f.kind.startsWith("more than") ? "/files/loop-2.png" : f.serve ? `/files/${f.file}` : "/v1/images/generations");
  });

  test("one model, non-stream, messages → 502 in Anthropic's shape", async () => {
    queueImagesApi(f);
    const res = await post(gw, "/v1/messages", { model: IMAGES_API_MODEL, max_tokens: 100, messages: question });
    expect(res.status).toBe(502);
    const text = await res.text();
    expectNothingInternal(text);
    expect(JSON.parse(text)).toMatchObject({ type: "error", error: { type: f.errorType === "timeout_error" ? "timeout_error" : "api_error", message: f.message } });
  });

  test("one model, stream requested of the images API → 502 JSON (nothing was sent yet)", async () => {
    const before = await gw.balanceMicro();
    queueImagesApi(f);
    const res = await post(gw, "/v1/chat/completions", { model: IMAGES_API_MODEL, messages: question, stream: true });
    expect(res.status).toBe(502);
    expect(res.headers.get("content-type")).toContain("application/json");
    expect(((await res.json()) as any).error.message).toBe(f.message);
    expect(await gw.balanceMicro()).toBe(before);
  });

  test("with a fallback model, non-stream → the fallback answers 200; only its tokens are charged", async () => {
    const before = await gw.balanceMicro();
    queueImagesApi(f);
    const res = await post(gw, "/v1/chat/completions", { models: [IMAGES_API_MODEL, OPENAI_MODEL], messages: question });
    expect(res.status).toBe(200);
    const body = (await res.json()) as any;
    expect(body.model).toBe(OPENAI_MODEL);
    expect(body.choices[0].message.content).toBe("Echo: Draw a lighthouse at dusk");
    expect(before - (await gw.balanceMicro())).toBe(answerCostMicro(OPENAI_PRICING, body.usage.prompt_tokens, body.usage.completion_tokens, 0));
  });

  test("with a fallback model, stream → the fallback streams 200; only its tokens are charged", async () => {
    const before = await gw.balanceMicro();
    queueImagesApi(f);
    const res = await post(gw, "/v1/messages", { models: [IMAGES_API_MODEL, OPENAI_MODEL], max_tokens: 100, messages: question, stream: true });
    expect(res.status).toBe(200);
    const frames = sseFrames(await res.text());
    expect(frames.at(-1)!.event).toBe("message_stop");
    expect(JSON.parse(frames[0]!.data).message.model).toBe(OPENAI_MODEL);
    const usage = JSON.parse(frames.find((x) => x.event === "message_delta")!.data).usage;
    expect(before - (await gw.balanceMicro())).toBe(answerCostMicro(OPENAI_PRICING, usage.input_tokens, usage.output_tokens, 0));
  });

  test("a chat stream already under way → an error frame, nothing charged", async () => {
    const before = await gw.balanceMicro();
    queueChatStream(f);
    const res = await post(gw, "/v1/chat/completions", { models: [IMAGE_CHAT_MODEL, OPENAI_MODEL], messages: question, stream: true });
    expect(res.status).toBe(200);
    const text = await res.text();
    expectNothingInternal(text);
    const frames = sseFrames(text);
    expect(JSON.parse(frames.at(-1)!.data).error).toEqual({ message: f.message, type: f.errorType, param: null, code: null });
    expect(frames.some((x) => x.data === "[DONE]")).toBe(false);
    expect(await gw.balanceMicro()).toBe(before);
  });

  test("a chat stream already under way, messages → an Anthropic error event", async () => {
    queueChatStream(f);
    const res = await post(gw, "/v1/messages", { model: IMAGE_CHAT_MODEL, max_tokens: 100, messages: question, stream: true });
    const text = await res.text();
    expectNothingInternal(text);
    const last = sseFrames(text).at(-1)!;
    expect(last.event).toBe("error");
    expect(JSON.parse(last.data).error.message).toBe(f.message);
  });
});

describe("redirects within the image's own origin", () => {
  test("are followed (up to 3): a file id that redirects to its path is inlined", async () => {
    upstream.reply({ kind: "json", body: { created: 1, data: [{ url: `${upstream.url}/files/file-abc` }] } });
    upstream.reply({ kind: "text", status: 302, headers: { location: "/files/file-abc/content" }, body: "" });
    upstream.reply({ kind: "text", status: 307, headers: { location: `${upstream.url}/files/file-abc/content.png` }, body: "" });
    upstream.reply({ kind: "bytes", headers: { "content-type": "image/png" }, body: PNG });
    const res = await post(gw, "/v1/chat/completions", { model: IMAGES_API_MODEL, messages: question });
    expect(res.status).toBe(200);
    const content = ((await res.json()) as any).choices[0].message.content as string;
    expect(content.startsWith("![image](data:image/png;base64,")).toBe(true);
    expect(upstream.requests.map((r) => r.path)).toEqual(["/v1/images/generations", "/files/file-abc", "/files/file-abc/content", "/files/file-abc/content.png"]);
  });
});
