import { afterAll, beforeAll, expect, test } from "bun:test";
import net from "node:net";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startGatewayProcess, type GatewayProcess } from "../helpers/gateway-process.ts";

/**
 * Clients that stop reading make the gateway stop reading their upstreams after a bounded buffer,
 * whatever the answer's length. 2,000 clients each open an endless streamed answer, read its first
 * bytes and then read nothing: the gateway (a real process) holds them all, and cuts every upstream
 * stream when they leave. What that costs in RSS (≤ 300 MB) is measured by bench/memory.ts.
 */
const CLIENTS = Number(process.env.CLIENTS ?? 2_000);
const FRAME = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"${"lorem ipsum ".repeat(340)}"},"finish_reason":null}]}\n\n`;

let upstream: ReturnType<typeof Bun.serve>;
let dir: string;
let gateway: GatewayProcess;
let upstreamBytes = 0;
let openUpstreamStreams = 0;
/** Pause between frames; 0: as fast as the gateway reads. */
let paceMs = 0;

beforeAll(async () => {
  // An upstream that streams as fast as it is read, for ever.
  upstream = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch() {
      openUpstreamStreams++;
      let open = true;
      return new Response(
        new ReadableStream({
          type: "direct",
          async pull(controller) {
            try {
              while (open) {
                const wrote = controller.write(FRAME);
                upstreamBytes += FRAME.length;
                const flushed = controller.flush();
                // Wait when the socket is full; otherwise let the event loop turn between frames.
                if (typeof wrote !== "number" || typeof flushed !== "number") await Promise.all([wrote, flushed]);
                else if (paceMs > 0) await Bun.sleep(paceMs);
                else await new Promise<void>((resolve) => setImmediate(resolve));
              }
            } catch {}
          },
          cancel() {
            open = false;
            openUpstreamStreams--;
          },
        }),
        { headers: { "content-type": "text/event-stream" } },
      );
    },
  });
  dir = mkdtempSync(join(tmpdir(), "switchyard-nonreading-"));
  const config = join(dir, "switchyard.json");
  writeFileSync(config, JSON.stringify({
    providers: [{ id: "up", kind: "openai", base_url: `http://127.0.0.1:${upstream.port}/v1` }],
    models: [{ id: "test/free", provider: "up", upstream_model: "m", category: "free", context_length: 100_000 }],
    limits: { requests_per_minute: 1_000_000 },
  }));
  gateway = await startGatewayProcess({ SWITCHYARD_CONFIG: config, SWITCHYARD_DB: join(dir, "gw.sqlite") });
});

afterAll(async () => {
  if (gateway) {
    gateway.child.kill("SIGKILL");
    await gateway.child.exited;
  }
  upstream?.stop(true);
  rmSync(dir, { recursive: true, force: true });
});

/** A client that sends its request, reads until the answer's first bytes, then stops reading. */
function stalledClient(port: number, key: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ model: "test/free", stream: true, messages: [{ role: "user", content: "go on forever" }] });
    const socket = net.connect(port, "127.0.0.1", () => {
      socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    });
    socket.once("data", (bytes) => {
      socket.pause();
      if (!bytes.toString().startsWith("HTTP/1.1 200")) reject(new Error(`not an answer: ${bytes.toString().slice(0, 200)}`));
      resolve(socket);
    });
    socket.once("error", reject);
  });
}

async function openStalled(count: number): Promise<net.Socket[]> {
  const port = Number(new URL(gateway.url).port);
  const sockets: net.Socket[] = [];
  for (let i = 0; i < count; i += 200) {
    sockets.push(...(await Promise.all(Array.from({ length: Math.min(200, count - i) }, () => stalledClient(port, gateway.key)))));
  }
  return sockets;
}

async function closeAll(sockets: net.Socket[]): Promise<void> {
  for (const s of sockets) s.destroy();
  const deadline = Date.now() + 10_000;
  while (openUpstreamStreams > 0 && Date.now() < deadline) await Bun.sleep(50);
  expect(openUpstreamStreams).toBe(0);
}

test(`${CLIENTS} open streams whose clients read nothing are all held; when the clients leave, every upstream stream is cut`, async () => {
  // A 4 KB frame a second each (ten times a fast model's pace): the answers keep coming while
  // nobody reads them.
  paceMs = 1_000;
  const sockets = await openStalled(CLIENTS);
  expect(openUpstreamStreams).toBe(CLIENTS);
  // The clients leave: every upstream request is cut, and the gateway is still there.
  await closeAll(sockets);
  expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
}, 60_000);

test("a client that stops reading stops the gateway reading its upstream (what moves is what the sockets' buffers hold)", async () => {
  paceMs = 0;
  const sockets = await openStalled(4);
  // Fill the kernel's socket buffers (autotuned, several MB each way), then watch for more. Still
  // for a whole second first: on a loaded machine the gateway's thread may be starved for 250 ms
  // while the buffers are still filling (a CI run saw 52.7 MB "settle", then 64.5 MB).
  let last = -1;
  for (let i = 0, still = 0; i < 120 && still < 4; i++) {
    still = upstreamBytes === last ? still + 1 : 0;
    last = upstreamBytes;
    await Bun.sleep(250);
  }
  const settled = upstreamBytes;
  await Bun.sleep(1_000);
  expect(upstreamBytes).toBe(settled);
  expect(settled).toBeLessThan(4 * 64 * 2 ** 20);
  await closeAll(sockets);
}, 60_000);
