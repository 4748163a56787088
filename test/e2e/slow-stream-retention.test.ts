import { afterAll, beforeAll, expect, test } from "bun:test";
import { edenGC, fullGC, heapStats } from "bun:jsc";
import type { Socket } from "bun";
import { rawUpstream, type RawSocket, type RawUpstream } from "../helpers/raw-upstream.ts";
import { OPENAI_MODEL, startGateway, type Gateway } from "../helpers/gateway.ts";
import { until } from "../helpers/until.ts";

/**
 * What a slow stream keeps of one frame until the next. Whatever a frame leaves alive until the
 * next one arrives is alive at every young collection in between, so it is moved to the old
 * generation and stays there, dead, until a full collection: with frames a second apart, each
 * frame of each open stream added ~770 bytes to the heap (a promise per read, its resolvers, and
 * the chunk it was resolved with). At 20,000 streams that was most of issue 30's 1 GB.
 *
 * Counted, not timed: every stream gets a frame, the test waits until every client has it, runs a
 * young collection, and repeats; the objects the young collections moved to the old generation are
 * what the frames left behind. The upstream is a raw socket and the clients raw sockets, so the only
 * frame-by-frame code here is the gateway's.
 */

const STREAMS = 60;
const FRAMES = 12;
const enc = new TextEncoder();
const chunked = (text: string) => `${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`;
const frame = (i: number) =>
  chunked(`data: {"id":"chatcmpl-slow","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"w${i} "},"finish_reason":null}]}\n\n`);
const HEAD = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
const FIRST = chunked(`data: {"id":"chatcmpl-slow","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n`);
const LAST =
  chunked(`data: {"id":"chatcmpl-slow","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n`) +
  chunked(`data: {"id":"chatcmpl-slow","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":${FRAMES},"total_tokens":${9 + FRAMES}}}\n\n`) +
  chunked("data: [DONE]\n\n") +
  "0\r\n\r\n";

let upstream: RawUpstream;
let gw: Gateway;
const upstreamSockets: RawSocket[] = [];

beforeAll(async () => {
  upstream = rawUpstream((_request, socket) => {
    // The role chunk and the first text: the gateway's head waits for the answer's first text.
    socket.write(HEAD + FIRST + frame(0));
    upstreamSockets.push(socket);
  });
  gw = await startGateway({ upstreamUrl: upstream.url });
});

afterAll(async () => {
  await gw.stop();
  upstream.stop();
});

interface Client {
  socket: Socket<undefined>;
  /** Content frames seen so far (each ends in a blank line). */
  frames: number;
  ended: boolean;
}

async function openClient(): Promise<Client> {
  const body = JSON.stringify({ model: OPENAI_MODEL, stream: true, max_tokens: 50, messages: [{ role: "user", content: "Say something slowly." }] });
  const request = `POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer ${gw.key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
  const client = { frames: 0, ended: false } as Client;
  const url = new URL(gw.url);
  client.socket = await Bun.connect({
    hostname: url.hostname,
    port: Number(url.port),
    socket: {
      open(socket) {
        socket.write(request);
      },
      data(_socket, bytes) {
        const text = bytes.toString("latin1");
        for (let at = text.indexOf("\n\n"); at !== -1; at = text.indexOf("\n\n", at + 2)) client.frames++;
        if (text.includes("[DONE]")) client.ended = true;
      },
    },
  });
  return client;
}

test("a slow stream keeps nothing of a frame once the next is awaited: young collections between frames promote (almost) nothing", async () => {
  const clients = await Promise.all(Array.from({ length: STREAMS }, openClient));
  await until("every stream's first text", 10_000, () => upstreamSockets.length === STREAMS && clients.every((c) => c.frames >= 2));

  fullGC();
  const before = heapStats().objectTypeCounts;
  for (let i = 1; i <= FRAMES; i++) {
    for (const socket of upstreamSockets) socket.write(frame(i));
    await until(`frame ${i} at every client`, 10_000, () => clients.every((c) => c.frames >= 2 + i));
    // The frame is out; what it left alive now survives this collection.
    edenGC();
  }
  const after = heapStats().objectTypeCounts;
  const promoted = (type: string) => ((after[type] ?? 0) - (before[type] ?? 0)) / (STREAMS * FRAMES);

  for (const socket of upstreamSockets) socket.write(LAST);
  await until("every answer's end", 10_000, () => clients.every((c) => c.ended));
  for (const c of clients) c.socket.end();

  // Waiting with a promise a read left 1 promise, 2 functions, 2 objects and the chunk (a
  // Uint8Array and its ArrayBuffer) per frame; a new array per read, 1 array and the chunk.
  expect(promoted("Promise")).toBeLessThan(0.2);
  expect(promoted("Uint8Array")).toBeLessThan(0.2);
  expect(promoted("ArrayBuffer")).toBeLessThan(0.2);
  expect(promoted("Function")).toBeLessThan(0.3);
  expect(promoted("Array")).toBeLessThan(0.3);

  // And the streams were whole and billed.
  await gw.app.services.settled();
  expect(clients.every((c) => c.frames >= FRAMES + 3)).toBe(true);
});
