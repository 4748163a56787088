/**
 * Connections with nothing under way are closed after `server.connection_idle_ms`: a client with
 * no key held the gateway's every file descriptor with idle keep-alive connections (kept 120 s),
 * and no tenant could connect (a hostile-tenant probe, twenty-sixth session). The real entry point
 * (src/index.ts sets Bun's idleTimeout from the setting); an admitted admin request's connection
 * is kept longer (its reports may run 30 s), and a request without the token's is not.
 */
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startFakeUpstream, type FakeUpstream } from "../helpers/fake-upstream.ts";
import { startGatewayProcess, stopGatewayProcess, type GatewayProcess } from "../helpers/gateway-process.ts";

setDefaultTimeout(60_000);
const ADMIN = "admin-idle-0123456789abcdef0123456789abcdef";
const dir = mkdtempSync(join(tmpdir(), "switchyard-idle-"));
let upstream: FakeUpstream | undefined;
let gateway: GatewayProcess | undefined;
afterAll(async () => {
  await stopGatewayProcess(gateway);
  await upstream?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A raw connection that sends `request` once (none: nothing at all), reads what comes, and says when it was closed. */
function connection(url: string, request?: string) {
  const socket = net.connect(Number(new URL(url).port), "127.0.0.1");
  const state = { closed: false, got: "", socket };
  socket.on("data", (d) => (state.got += d.toString("latin1")));
  socket.on("close", () => (state.closed = true));
  socket.on("error", () => {});
  if (request) socket.write(request);
  return state;
}

test("idle connections are closed after connection_idle_ms (2 s here, checked within 6); an admin's answered request keeps its connection longer", async () => {
  upstream = await startFakeUpstream();
  const config = join(dir, "switchyard.json");
  writeFileSync(config, JSON.stringify({
    providers: [{ id: "up", kind: "openai", base_url: `${upstream.url}/v1` }],
    models: [{ id: "test/paid", provider: "up", upstream_model: "m", category: "text", context_length: 100000, pricing: { input_per_mtok: 1, output_per_mtok: 1 } }],
    server: { connection_idle_ms: 2_000 },
  }));
  gateway = await startGatewayProcess({ SWITCHYARD_CONFIG: config, SWITCHYARD_DB: join(dir, "ledger.sqlite"), SWITCHYARD_ADMIN_TOKEN: ADMIN });
  const health = connection(gateway.url, "GET /health HTTP/1.1\r\nhost: x\r\n\r\n");
  const body = JSON.stringify({ model: "test/paid", messages: [{ role: "user", content: "hi" }] });
  const chat = connection(gateway.url, `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${gateway.key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  const admin = connection(gateway.url, `GET /v1/admin/accounts HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${ADMIN}\r\n\r\n`);
  const notAdmin = connection(gateway.url, `GET /v1/admin/accounts HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${"x".repeat(ADMIN.length)}\r\n\r\n`);
  await Bun.sleep(6_000);
  for (const c of [health, chat, admin]) expect(c.got.split("\r\n")[0]).toBe("HTTP/1.1 200 OK");
  expect(notAdmin.got.split("\r\n")[0]).toBe("HTTP/1.1 401 Unauthorized");
  // Nothing under way after an answer: closed (Bun checks every few seconds; 2 s asked, 6 s waited).
  // A connection that sends nothing at all Bun closes by itself after ~10 s, whatever the setting.
  expect({ health: health.closed, chat: chat.closed, notAdmin: notAdmin.closed }).toEqual({ health: true, chat: true, notAdmin: true });
  // The operator's connection is kept (ADMIN_IDLE_SECONDS, 60 s).
  expect(admin.closed).toBe(false);
  for (const c of [health, chat, admin, notAdmin]) c.socket.destroy();
});
