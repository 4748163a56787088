/**
 * Descriptors kept for the tenants (limits/connection-guard.ts): a client with no key that opened
 * thousands of keep-alive connections and left them idle held the gateway at its open-file limit,
 * and no tenant could connect (a hostile-tenant probe, twenty-sixth session). The real entry point
 * under a low limit (`ulimit -n`), so that a few hundred connections play the attack's 20,000: one
 * address keeps at most `server.max_connections_per_address` connections once a quarter of the
 * limit is in use (an answer on one more closes it), and near the limit idle connections are
 * closed at once and answers close theirs. Another address (127.0.0.2: all of 127/8 is loopback)
 * plays the tenant.
 */
import { afterAll, expect, setDefaultTimeout, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startGatewayProcess, stopGatewayProcess, type GatewayProcess } from "../helpers/gateway-process.ts";

setDefaultTimeout(60_000);
const dir = mkdtempSync(join(tmpdir(), "switchyard-conn-caps-"));
const gateways: GatewayProcess[] = [];
const sockets: net.Socket[] = [];
afterAll(async () => {
  for (const s of sockets) s.destroy();
  for (const g of gateways) await stopGatewayProcess(g);
  rmSync(dir, { recursive: true, force: true });
});

/** A connection from `from` that sends one GET of `path` and stays open: what it got, whether the gateway closed it, and when its answer came. */
function healthCheck(url: string, from: string, path = "/health", headers = "") {
  const started = performance.now();
  const socket = net.connect({ port: Number(new URL(url).port), host: "127.0.0.1", localAddress: from });
  sockets.push(socket);
  const state = { got: "", closed: false, answeredMs: undefined as number | undefined, socket, started, firstStarted: started, retried: false };
  socket.on("data", (d) => {
    state.got += d.toString("latin1");
    if (state.answeredMs === undefined && state.got.includes("\r\n\r\n")) state.answeredMs = performance.now() - started;
  });
  socket.on("close", () => (state.closed = true));
  socket.on("error", () => {});
  socket.write(`GET ${path} HTTP/1.1\r\nhost: x\r\n${headers}\r\n`);
  return state;
}
type Check = ReturnType<typeof healthCheck>;

const answered = (c: Check) => c.got.startsWith("HTTP/1.1 200");
const closesItself = (c: Check) => /\r\nconnection: close\r\n/i.test(c.got.split("\r\n\r\n")[0] ?? "");

async function until(what: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!what() && Date.now() < end) await Bun.sleep(25);
}

/** The gateway's /metrics, asked from an address of its own (127.0.0.3), so that it takes none of the others' connections. */
async function metrics(url: string): Promise<string> {
  const c = healthCheck(url, "127.0.0.3", "/metrics", "connection: close\r\n");
  await until(() => c.closed, 5_000);
  return c.got;
}
const sample = (text: string, name: string) => Number(text.split("\n").find((l) => l.startsWith(`${name} `))?.split(" ")[1] ?? Number.NaN);

async function start(name: string, openFiles: number, perAddress: number): Promise<GatewayProcess> {
  const config = join(dir, `${name}.json`);
  writeFileSync(config, JSON.stringify({
    providers: [{ id: "up", kind: "openai", base_url: "http://127.0.0.1:9/v1" }],
    models: [{ id: "test/m", provider: "up", upstream_model: "m", category: "text", context_length: 100000, pricing: { input_per_mtok: 1, output_per_mtok: 1 } }],
    server: { max_connections_per_address: perAddress },
  }));
  const gateway = await startGatewayProcess({ SWITCHYARD_CONFIG: config, SWITCHYARD_DB: join(dir, `${name}.sqlite`) }, { openFiles });
  gateways.push(gateway);
  return gateway;
}

test("once a quarter of the open-file limit is in use, one address keeps at most max_connections_per_address connections: an answer on one more closes it; another address is not touched", async () => {
  const gateway = await start("cap", 400, 20);
  const first = await metrics(gateway.url);
  expect(sample(first, "process_max_fds")).toBe(400);
  // Past a quarter of 400: the guard arms at the watchdog's next reading (every 500 ms).
  const before: Check[] = [];
  for (let i = 0; i < 100; i++) before.push(healthCheck(gateway.url, "127.0.0.1"));
  await until(() => before.every(answered), 10_000);
  expect(before.every(answered)).toBe(true);
  await Bun.sleep(1_200);
  expect(sample(await metrics(gateway.url), "process_open_fds")).toBeGreaterThanOrEqual(100);

  const after: Check[] = [];
  for (let i = 0; i < 60; i++) after.push(healthCheck(gateway.url, "127.0.0.1"));
  const tenant: Check[] = [];
  for (let i = 0; i < 5; i++) tenant.push(healthCheck(gateway.url, "127.0.0.2"));
  await until(() => [...after, ...tenant].every(answered), 10_000);
  await Bun.sleep(500);
  expect([...after, ...tenant].every(answered)).toBe(true);
  // Every request was served; past the address's 20, each answer said it closes its connection, and it did.
  const closing = after.filter(closesItself);
  expect(closing.length).toBe(40);
  expect(closing.every((c) => c.closed)).toBe(true);
  expect(after.filter((c) => !c.closed).length).toBe(20);
  // The connections from before the guard armed are not its to close (they are idle-timed out as ever).
  expect(before.filter((c) => c.closed).length).toBe(0);
  // The tenant's address has its own count.
  expect(tenant.some(closesItself)).toBe(false);
  expect(tenant.some((c) => c.closed)).toBe(false);
  const text = await metrics(gateway.url);
  expect(text).toContain('switchyard_connections_closed_total{reason="address_cap"} 40');
  expect(text).toContain('switchyard_connections_closed_total{reason="idle_near_limit"} 0');
});

test("near the open-file limit, idle connections are closed at once and answers close theirs: a tenant still connects while another address keeps reopening hundreds", async () => {
  // No cap per address here: what is tested is the pressure alone.
  const gateway = await start("pressure", 300, 0);
  // The attacker keeps 400 connections open from one address (more than the gateway's 300 descriptors), reopening any that closes.
  let attacking = true;
  let opened = 0;
  const attack = () => {
    if (!attacking) return;
    opened++;
    const c = healthCheck(gateway.url, "127.0.0.1");
    c.socket.on("close", () => setTimeout(attack, 5));
  };
  for (let i = 0; i < 400; i++) attack();
  // A tenant connects anew every 300 ms for 4 s, while the attack goes on.
  await Bun.sleep(1_500);
  // A connection accepted between the watchdog's reading and its closing of idle connections, its
  // request not yet read, is idle to Bun and closed with it: the client sees a reset before any
  // byte and connects again once, as HTTP clients do for a request that cannot have been handled
  // (decisions.md "A fresh connection closed under pressure"). A second such close is a failure.
  const tenant: Check[] = [];
  const connectTenant = (slot: number, firstStarted: number, retried = false) => {
    const c = healthCheck(gateway.url, "127.0.0.2");
    Object.assign(c, { firstStarted, retried });
    tenant[slot] = c;
    c.socket.on("close", () => {
      if (c.got === "" && !retried) connectTenant(slot, firstStarted, true);
    });
  };
  for (let i = 0; i < 13; i++) {
    connectTenant(i, performance.now());
    await Bun.sleep(300);
  }
  await until(() => tenant.every(answered), 10_000);
  attacking = false;
  // Waits are counted from the first try.
  const waits = tenant.map((c) => (c.answeredMs === undefined ? Number.POSITIVE_INFINITY : c.answeredMs + (c.started - c.firstStarted)));
  expect(tenant.filter((c) => c.retried).length).toBeLessThanOrEqual(3);
  // Without the watchdog the attacker holds every descriptor and these wait until it stops. On a
  // failure, what each tenant connection saw (a close without an answer, or nothing at all) says why.
  expect(tenant.filter((c) => !answered(c)).map((c) => ({ got: c.got.slice(0, 40), closed: c.closed }))).toEqual([]);
  expect(Math.max(...waits)).toBeLessThan(2_500);
  expect(opened).toBeGreaterThan(400);
  for (const s of sockets) s.destroy();
  await Bun.sleep(1_000);
  const text = await metrics(gateway.url);
  expect(sample(text, "switchyard_open_files_pressure_total")).toBeGreaterThanOrEqual(1);
  expect(Number(/switchyard_connections_closed_total\{reason="idle_near_limit"\} (\d+)/.exec(text)?.[1])).toBeGreaterThan(0);
  expect(Number(/switchyard_connections_closed_total\{reason="pressure"\} (\d+)/.exec(text)?.[1])).toBeGreaterThan(0);
  expect(gateway.stderr()).toContain("open files near the limit");
});
