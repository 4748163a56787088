/**
 * What one stream whose frames arrive in a burst costs the request thread: an Anthropic upstream
 * (a child process) writes all of a long answer's frames at once, as a fast vendor, a cached answer
 * or a hostile upstream can, and a client (another child) reads it through the gateway,
 * relayed (`/v1/messages`) and translated (`/v1/chat/completions`). The gateway's thread runs a
 * 1 ms interval whose longest late tick is the stall every other tenant's request waited through.
 *
 *   bun bench/burst-stall.ts [--rounds 5] [--frames 8192] [--streams 1]
 *
 * `--streams N` runs N such streams at once. Reported per path: the longest stall (ms) and the
 * request's wall time, best, median and worst of the rounds (the first round, warm-up, left out).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createApp } from "../src/app.ts";
import { resolveSettings } from "../src/config/load-config.ts";
import { openDatabase } from "../src/store/database.ts";
import { silentLogger } from "../src/log/log.ts";
import { buildAnthropic } from "./fake-answers.ts";
import { parseArgs, readyPort, serveAsChild } from "./child-process.ts";
import { max, median, min } from "./stats.ts";
import { watchLoopStall } from "../test/helpers/loop-stall.ts";

const args = parseArgs(process.argv.slice(2).filter((a) => a !== "--serve"));
const FRAMES = Number(args.get("frames") ?? 8192);

if (process.argv.includes("--client")) {
  // The client, a process of its own started once (spawning one per round stalled the gateway's
  // thread by itself, 50–135 ms for ten): a line "<url> <key> <bodyFile> <n>" on stdin starts n
  // requests at once, each read to its end; it answers one line of their statuses and sizes.
  const lines = console as unknown as AsyncIterable<string>;
  for await (const line of lines) {
    const [url, key, bodyFile, n] = line.trim().split(" ") as [string, string, string, string];
    const body = await Bun.file(bodyFile).text();
    const outs = await Promise.all(Array.from({ length: Number(n) }, async () => {
      const res = await fetch(url, { method: "POST", headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" }, body });
      let bytes = 0;
      for await (const chunk of res.body!) bytes += chunk.byteLength;
      return `${res.status}:${bytes}`;
    }));
    process.stdout.write(`${outs.join(" ")}\n`);
  }
  process.exit(0);
} else if (process.argv.includes("--serve")) {
  const { whole } = buildAnthropic(true, FRAMES, 20);
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: () => new Response(whole, { headers: { "content-type": "text/event-stream" } }),
  });
  serveAsChild(server, true);
} else {
  await main();
}

async function main(): Promise<void> {
  const ROUNDS = Number(args.get("rounds") ?? 5);
  const STREAMS = Number(args.get("streams") ?? 1);
  const child = Bun.spawn([process.execPath, import.meta.path, "--serve", "--frames", String(FRAMES)], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
  const upstreamUrl = `http://127.0.0.1:${await readyPort(child.stdout, "the upstream")}`;
  const dir = mkdtempSync(join(tmpdir(), "switchyard-burst-"));
  const db = openDatabase(join(dir, "ledger.sqlite"));
  const settings = resolveSettings(
    {
      providers: [{ id: "up", kind: "anthropic", base_url: upstreamUrl, api_key_env: "BENCH_KEY" }],
      models: [{ id: "bench/claude", provider: "up", upstream_model: "claude-sonnet-4-5", category: "text", context_length: 200_000, pricing: { input_per_mtok: 3_000, output_per_mtok: 15_000 } }],
      limits: { requests_per_minute: 1_000_000, max_tokens_cap: 100_000 },
    },
    { BENCH_KEY: "sk-ant-bench" },
    "bench",
  );
  const app = createApp({ db, settings, log: silentLogger });
  const account = await app.services.accounts.createAccount("bench", 1e12);
  const key = (await app.services.accounts.createKey(account.id, "bench"))!.key;
  app.listen({ port: 0, hostname: "127.0.0.1" });
  const base = `http://127.0.0.1:${app.server!.port}`;
  const messages = [{ role: "user", content: "Write a long answer." }];
  const paths = {
    relayed: { path: "/v1/messages", body: { model: "bench/claude", max_tokens: FRAMES * 2, stream: true, messages } },
    translated: { path: "/v1/chat/completions", body: { model: "bench/claude", max_tokens: FRAMES * 2, stream: true, messages } },
  };
  const client = Bun.spawn([process.execPath, import.meta.path, "--client"], { stdin: "pipe", stdout: "pipe", stderr: "inherit" });
  const clientOut = client.stdout.getReader();
  let pending = "";
  const nextLine = async (): Promise<string> => {
    while (!pending.includes("\n")) {
      const { value, done } = await clientOut.read();
      if (done) throw new Error("the client ended");
      pending += new TextDecoder().decode(value);
    }
    const at = pending.indexOf("\n");
    const line = pending.slice(0, at);
    pending = pending.slice(at + 1);
    return line;
  };
  for (const [name, p] of Object.entries(paths)) {
    const bodyFile = join(dir, `${name}.json`);
    await Bun.write(bodyFile, JSON.stringify(p.body));
    const stalls: number[] = [];
    const walls: number[] = [];
    for (let round = 0; round < ROUNDS + 1; round++) {
      await Bun.sleep(100);
      Bun.gc(true);
      const watch = watchLoopStall();
      const t0 = performance.now();
      client.stdin.write(`${base}${p.path} ${key} ${bodyFile} ${STREAMS}\n`);
      client.stdin.flush();
      const outs = (await nextLine()).split(" ");
      const wall = performance.now() - t0;
      const stall = watch.stop();
      for (const out of outs) if (!out.startsWith("200:")) throw new Error(`${name}: ${out}`);
      if (round > 0) {
        stalls.push(stall);
        walls.push(wall);
      }
    }
    const show = (xs: number[]) => `${min(xs).toFixed(0)} / ${median(xs).toFixed(0)} / ${max(xs).toFixed(0)}`;
    console.log(`${name.padEnd(11)} ${FRAMES} frames × ${STREAMS}: longest stall (min / median / max) ${show(stalls)} ms; wall ${show(walls)} ms`);
  }
  await app.stop(true);
  await app.services.settled();
  await app.services.ledger.close();
  db.close();
  child.kill();
  client.kill();
  rmSync(dir, { recursive: true, force: true });
  process.exit(0);
}
