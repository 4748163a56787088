import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Socket } from "bun";
import { rawUpstream, type RawSocket, type RawUpstream } from "../helpers/raw-upstream.ts";
import { OPENAI_MODEL, startGateway, type Gateway } from "../helpers/gateway.ts";
import { faultyLedger, type LedgerFaults } from "../helpers/faulty-ledger.ts";
import { until } from "../helpers/until.ts";

/**
 * A client that saw an answer's last frame was billed for it: the last frames leave with the
 * answer's end, once its settlement is durable. Here the upstream sends no end marker (some
 * OpenAI-compatible servers end on finish_reason and usage alone), and its last frames and the
 * chunked terminator come in one socket read: the stream, woken in that read's callback, must
 * not send them before the body's end is seen and the settlement done.
 */

const chunked = (text: string) => `${Buffer.byteLength(text).toString(16)}\r\n${text}\r\n`;
const sse = (delta: string, finish: string | null, usage?: string) =>
  `data: {"id":"chatcmpl-end","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":${delta},"finish_reason":${finish === null ? "null" : `"${finish}"`}}]${usage ? `,"usage":${usage}` : ""}}\n\n`;
const HEAD = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";

let upstream: RawUpstream;
let gw: Gateway;
let faults: LedgerFaults;
let upstreamSocket: RawSocket | undefined;

beforeAll(async () => {
  upstream = rawUpstream((_request, socket) => {
    socket.write(HEAD + chunked(sse(`{"role":"assistant","content":"first "}`, null)));
    upstreamSocket = socket;
  });
  gw = await startGateway({ upstreamUrl: upstream.url, wrapLedger: (l) => {
      const faulty = faultyLedger(l);
      faults = faulty.faults;
      return faulty.ledger;
    },
  });
});

afterAll(async () => {
  await gw.stop();
  upstream.stop();
});

test("no end marker, last frames and the body's end in one read: they reach the client only after the settlement, with the end", async () => {
  let received = "";
  const body = JSON.stringify({ model: OPENAI_MODEL, stream: true, messages: [{ role: "user", content: "Finish without [DONE]." }] });
  const url = new URL(gw.url);
  const client: Socket<undefined> = await Bun.connect({
    hostname: url.hostname,
    port: Number(url.port),
    socket: {
      open(socket) {
        socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer ${gw.key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      },
      data(_socket, bytes) {
        received += bytes.toString("latin1");
      },
    },
  });
  await until("the first frame", 5_000, () => received.includes("first "));

  let release!: () => void;
  faults.settleWaits = new Promise<void>((resolve) => (release = resolve));
  upstreamSocket!.write(chunked(sse(`{"content":"LASTWORD"}`, "stop", `{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}`)) + "0\r\n\r\n");
  await Bun.sleep(150);
  // The settlement is held: nothing of the answer's end may have gone out.
  expect(received).not.toContain("LASTWORD");
  release();
  await until("the end", 5_000, () => received.includes("data: [DONE]"));
  faults.settleWaits = undefined;
  const lastword = received.indexOf("LASTWORD");
  expect(lastword).toBeGreaterThan(0);
  expect(received.indexOf('"finish_reason":"stop"')).toBeGreaterThan(received.indexOf("first "));
  expect(received.indexOf("data: [DONE]")).toBeGreaterThan(lastword);
  client.end();
});
