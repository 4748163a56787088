/**
 * Memory bounds, measured here rather than asserted in tests (a test checks what is kept and
 * what stays open; how many megabytes that costs depends on the machine and the allocator):
 *
 *   bun bench/memory.ts [--clients N]
 *
 * 1. meter: a 24 MB streamed answer with no usage report through one UsageMeter; the heap it
 *    leaves grown after a full collection. Target < 8 MB (it keeps one 64 KB sample).
 * 2. non-reading: N clients (default 2,000) each open an endless streamed answer from the gateway
 *    (a real process, `bun src/index.ts`), read its first bytes, then read nothing, while the
 *    upstream offers a 4 KB frame a second each; the gateway's RSS after 3 s. Target ≤ 300 MB.
 */
import net from "node:net";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { UsageMeter } from "../src/billing/usage-meter.ts";
import { createTokenizer } from "../src/billing/token-estimate.ts";
import { startGatewayProcess } from "../test/helpers/gateway-process.ts";
import { parseArgs } from "./child-process.ts";

const args = parseArgs();
const CLIENTS = Number(args.get("clients") ?? 2_000);
const targets: { what: string; value: number; unit: string; target: string; met: boolean }[] = [];

// ---- 1. the usage meter's heap for a 24 MB answer ----
{
  const words = (n: number, seed: number) => Array.from({ length: n }, (_, i) => `w${(i * 7919 + seed) % 10007}`).join(" ") + " ";
  const tokenizer = createTokenizer();
  const meter = new UsageMeter(tokenizer.count);
  Bun.gc(true);
  const before = process.memoryUsage().heapUsed;
  for (let i = 0; i < 384; i++) {
    const text = `${i}: ${words(64 * 1024 / 6, i)}`.slice(0, 64 * 1024);
    meter.observe({ type: "text", text });
    if (i % 2 === 0) meter.defer({ data: "f".repeat(64 * 1024) }, () => [{ type: "text", text: `frame ${i}` }]);
  }
  Bun.gc(true);
  const grownMb = (process.memoryUsage().heapUsed - before) / 2 ** 20;
  await meter.total(() => "");
  targets.push({ what: "meter: heap grown by a 24 MB answer without usage", value: grownMb, unit: "MB", target: "< 8 MB", met: grownMb < 8 });
}

// ---- 2. the gateway's RSS with N clients that read nothing ----
{
  const FRAME = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"${"lorem ipsum ".repeat(340)}"},"finish_reason":null}]}\n\n`;
  let open = 0;
  const upstream = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch() {
      open++;
      let live = true;
      return new Response(
        new ReadableStream({
          type: "direct",
          async pull(controller) {
            try {
              while (live) {
                const wrote = controller.write(FRAME);
                const flushed = controller.flush();
                if (typeof wrote !== "number" || typeof flushed !== "number") await Promise.all([wrote, flushed]);
                else await Bun.sleep(1_000);
              }
            } catch {}
          },
          cancel() {
            live = false;
            open--;
          },
        }),
        { headers: { "content-type": "text/event-stream" } },
      );
    },
  });
  const dir = mkdtempSync(join(tmpdir(), "switchyard-bench-memory-"));
  const config = join(dir, "switchyard.json");
  writeFileSync(config, JSON.stringify({
    providers: [{ id: "up", kind: "openai", base_url: `http://127.0.0.1:${upstream.port}/v1` }],
    models: [{ id: "bench/free", provider: "up", upstream_model: "m", category: "free", context_length: 100_000 }],
    limits: { requests_per_minute: 1_000_000 },
  }));
  const gateway = await startGatewayProcess({ SWITCHYARD_CONFIG: config, SWITCHYARD_DB: join(dir, "gw.sqlite") });
  const port = Number(new URL(gateway.url).port);
  const rssMb = () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${gateway.child.pid}/status`, "utf8"))![1]) / 1024;
  const stalled = () =>
    new Promise<net.Socket>((resolve, reject) => {
      const body = JSON.stringify({ model: "bench/free", stream: true, messages: [{ role: "user", content: "go on forever" }] });
      const socket = net.connect(port, "127.0.0.1", () => {
        socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${gateway.key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      });
      socket.once("data", (bytes) => {
        socket.pause();
        if (!bytes.toString().startsWith("HTTP/1.1 200")) reject(new Error(`not an answer: ${bytes.toString().slice(0, 200)}`));
        resolve(socket);
      });
      socket.once("error", reject);
    });
  try {
    const before = rssMb();
    const sockets: net.Socket[] = [];
    for (let i = 0; i < CLIENTS; i += 200) sockets.push(...(await Promise.all(Array.from({ length: Math.min(200, CLIENTS - i) }, stalled))));
    await Bun.sleep(3_000);
    const during = rssMb();
    console.log(`non-reading: ${open} upstream streams open; gateway RSS ${before.toFixed(1)} MB before, ${during.toFixed(1)} MB with ${CLIENTS} stalled clients (${(((during - before) * 1024) / CLIENTS).toFixed(1)} KB each)`);
    targets.push({ what: `non-reading: gateway RSS, ${CLIENTS} clients reading nothing`, value: during, unit: "MB", target: "≤ 300 MB", met: during <= 300 });
    for (const s of sockets) s.destroy();
  } finally {
    gateway.child.kill("SIGKILL");
    await gateway.child.exited;
    upstream.stop(true);
    rmSync(dir, { recursive: true, force: true });
  }
}

for (const t of targets) console.log(`${t.met ? "met   " : "MISSED"}  ${t.what.padEnd(58)} ${t.value.toFixed(2)} ${t.unit} (target ${t.target})`);
