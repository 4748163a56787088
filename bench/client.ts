/**
 * The benchmark's own client, for what wrk cannot see: latency of each request (fetch), time to
 * first byte, time per chunk, many slow streams (raw sockets), and the soak with aborting clients.
 * Started by bench/run.ts as its own process (pinned beside the upstream), one task each:
 *
 *   bun bench/client.ts <spec.json>      → one JSON line on stdout (the result); progress on stderr
 *
 * Every answer is checked (status 200, a complete body or stream) so that a fast error is
 * never counted as a fast answer.
 */
import { readFileSync } from "node:fs";
import { idleRssKb, readStatusKb } from "./proc-status.ts";
import { pct, median, sortNum } from "./stats.ts";

export interface RequestSpec {
  url: string;
  headers: Record<string, string>;
  body: string;
  stream: boolean;
  /** Content chunks the answer has (for per-chunk timing). */
  chunks: number;
  /** A complete stream ends with this text (OpenAI `[DONE]`, Anthropic `message_stop`). */
  endsWith?: string;
}

export type ClientSpec =
  | { task: "alternate"; targets: { name: string; req: RequestSpec }[]; rounds: number; perRound: number; warmup: number }
  /** D and S: `openPerSecond` spreads the opening of the streams (all at once without it). */
  | { task: "slow"; req: RequestSpec; streams: number; chunks: number; intervalMs: number; openPerSecond?: number }
  | {
      task: "soak";
      gateway: string;
      key: string;
      total: number;
      warmup: number;
      concurrency: number;
      checkpoint: number;
      gatewayPid: number;
      chunks: number;
    };

const dec = new TextDecoder();
const log = (msg: string) => process.stderr.write(`  [client] ${msg}\n`);

const rssKb = (pid: number) => readStatusKb(pid, "VmRSS");

interface Timing {
  ok: boolean;
  /** ms from sending to the end of the body. */
  total: number;
  /** ms from sending to the first body bytes. */
  ttfb: number;
  /** ms from the first body bytes to the end. */
  body: number;
  error?: string;
}

async function timeOne(r: RequestSpec): Promise<Timing> {
  const t0 = performance.now();
  let res: Response;
  try {
    res = await fetch(r.url, { method: "POST", headers: r.headers, body: r.body });
  } catch (err) {
    return { ok: false, total: NaN, ttfb: NaN, body: NaN, error: String(err) };
  }
  if (res.status !== 200) {
    const text = await res.text().catch(() => "");
    return { ok: false, total: NaN, ttfb: NaN, body: NaN, error: `status ${res.status}: ${text.slice(0, 200)}` };
  }
  const reader = res.body!.getReader();
  let first = 0;
  let tail = "";
  let bytes = 0;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    if (first === 0) first = performance.now();
    bytes += value.byteLength;
    // Only the end is checked, so the check costs the same whatever the target.
    tail = value.byteLength >= 64 ? dec.decode(value.subarray(value.byteLength - 64)) : (tail + dec.decode(value)).slice(-64);
  }
  const end = performance.now();
  if (bytes === 0) return { ok: false, total: NaN, ttfb: NaN, body: NaN, error: "empty body" };
  if (r.endsWith && !tail.trimEnd().endsWith(r.endsWith)) return { ok: false, total: NaN, ttfb: NaN, body: NaN, error: `incomplete stream, ends with ${JSON.stringify(tail.slice(-40))}` };
  if (!r.stream && !tail.trimEnd().endsWith("}")) return { ok: false, total: NaN, ttfb: NaN, body: NaN, error: "incomplete JSON body" };
  return { ok: true, total: end - t0, ttfb: first - t0, body: end - first };
}

/** Requests left out at the start of every target's turn in a round. */
const SEGMENT_WARMUP = 10;

/** A, C: sequential requests, one connection, targets in alternating rounds. */
async function alternate(spec: Extract<ClientSpec, { task: "alternate" }>) {
  const errors: Record<string, string[]> = {};
  const fail = (name: string, t: Timing) => ((errors[name] ??= []).length < 5 ? errors[name]!.push(t.error ?? "?") : 0);
  for (const t of spec.targets) {
    for (let i = 0; i < spec.warmup; i++) {
      const r = await timeOne(t.req);
      if (!r.ok) fail(t.name, r);
    }
  }
  const rounds: Record<string, { p50: number; p99: number; ttfb_p50: number; ttfb_p99: number; per_chunk_us: number; total_p50: number; errors: number; n: number }[]> = {};
  for (let round = 0; round < spec.rounds; round++) {
    for (const t of spec.targets) {
      Bun.gc(true);
      const totals: number[] = [];
      const ttfbs: number[] = [];
      const perChunk: number[] = [];
      let errs = 0;
      // A few unrecorded requests first: the switch from another target (a connection to open,
      // another port) is not a cost of this one.
      for (let i = 0; i < SEGMENT_WARMUP; i++) await timeOne(t.req);
      for (let i = 0; i < spec.perRound; i++) {
        const r = await timeOne(t.req);
        if (!r.ok) {
          errs++;
          fail(t.name, r);
          continue;
        }
        totals.push(r.total);
        ttfbs.push(r.ttfb);
        perChunk.push((r.body * 1000) / Math.max(1, t.req.chunks));
      }
      const s = sortNum(totals);
      const f = sortNum(ttfbs);
      (rounds[t.name] ??= []).push({
        p50: pct(s, 50), p99: pct(s, 99), total_p50: pct(s, 50),
        ttfb_p50: pct(f, 50), ttfb_p99: pct(f, 99),
        per_chunk_us: median(perChunk),
        errors: errs, n: totals.length,
      });
    }
  }
  return { rounds, errors };
}

/** An OpenAI stream's content chunk, as the gateway writes it (its first frame, with the role, is not one). */
const CONTENT = `"delta":{"content":`;

interface StreamReading {
  /** ms from connecting to the answer's first bytes. */
  ttfb: number;
  /** The longest wait between two reads after the first, ms. */
  maxGap: number;
  contentChunks: number;
  /** ms from connecting to the end of the answer. */
  duration: number;
}

/**
 * One streamed answer over a raw socket (Bun.connect): the request's bytes written as they are,
 * the answer's scanned as they come (never kept whole). A fetch and its ReadableStream per stream
 * cost the client more than 20,000 streams on one core leave it; a socket and a few short strings
 * do not. The answer must be a 200 that ends (chunked, or its Content-Length) with `data: [DONE]`;
 * `onOpen` is called once its head is read.
 */
function readStream(url: URL, request: Uint8Array, timeoutMs: number, onOpen: () => void): Promise<StreamReading> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let head = "";
    let headDone = false;
    let chunked = false;
    let length = -1;
    let bodyBytes = 0;
    // The last characters of the previous read, so that a content marker split across two reads is still counted once.
    let carry = "";
    let tail = "";
    let chunks = 0;
    let first = 0;
    let last = 0;
    let maxGap = 0;
    let unsent = request;
    let settled = false;
    const finish = (socket: { end(): void } | undefined, err?: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket?.end();
      if (err) reject(new Error(err));
      else resolve({ ttfb: first - t0, maxGap, contentChunks: chunks, duration: performance.now() - t0 });
    };
    let sock: { end(): void } | undefined;
    const timer = setTimeout(() => finish(sock, `no end after ${Math.round(timeoutMs / 1000)} s (${bodyBytes} bytes, ${chunks} content chunks)`), timeoutMs);
    const send = (socket: { write(b: Uint8Array): number }) => {
      const n = socket.write(unsent);
      unsent = n > 0 ? unsent.subarray(n) : unsent;
    };
    Bun.connect({
      hostname: url.hostname,
      port: Number(url.port),
      socket: {
        open(socket) {
          sock = socket;
          send(socket);
        },
        drain(socket) {
          if (unsent.byteLength) send(socket);
        },
        data(socket, bytes) {
          const now = performance.now();
          if (first === 0) first = now;
          else maxGap = Math.max(maxGap, now - last);
          last = now;
          let text = bytes.toString("latin1");
          if (!headDone) {
            head += text;
            const end = head.indexOf("\r\n\r\n");
            if (end < 0) return;
            const status = head.slice(9, 12);
            text = head.slice(end + 4);
            if (status !== "200") return finish(socket, `status ${status}: ${text.slice(0, 200)}`);
            const fields = head.slice(0, end);
            chunked = /\r\ntransfer-encoding:\s*chunked/i.test(fields);
            length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(fields)?.[1] ?? -1);
            headDone = true;
            onOpen();
          }
          bodyBytes += text.length;
          const scanned = carry + text;
          for (let i = scanned.indexOf(CONTENT); i >= 0; i = scanned.indexOf(CONTENT, i + CONTENT.length)) chunks++;
          carry = scanned.slice(-(CONTENT.length - 1));
          tail = (tail + text).slice(-96);
          const ended = chunked ? tail.endsWith("\r\n0\r\n\r\n") : length >= 0 && bodyBytes >= length;
          if (!ended) return;
          if (!tail.includes("data: [DONE]")) return finish(socket, `stream did not end with [DONE]: ${JSON.stringify(tail.slice(-60))}`);
          finish(socket);
        },
        close() {
          finish(undefined, `closed after ${bodyBytes} bytes${headDone ? "" : " (no complete head)"}, ending ${JSON.stringify(tail.slice(-60))}`);
        },
        error(socket, err) {
          finish(socket, String(err));
        },
        connectError(_socket, err) {
          finish(undefined, `connect: ${err}`);
        },
      },
    }).catch((err) => finish(undefined, `connect: ${err}`));
  });
}

export interface SlowResult {
  streams: number;
  completed: number;
  failed: number;
  failures: string[];
  stalled: number;
  peak_open_at_client: number;
  max_gap_ms: number;
  gap_p50_ms: number;
  gap_p99_ms: number;
  ttfb_p50_ms: number;
  ttfb_max_ms: number;
  duration_p50_ms: number;
  duration_max_ms: number;
  /** From the first stream opened to the last one ended. */
  wall_s: number;
  /** From the first stream opened to the last one's head read (the ramp). */
  opened_in_s: number;
}

/** D, S: many slow streams at once; every one must complete with all its chunks, and none may stall. */
async function slow(spec: Extract<ClientSpec, { task: "slow" }>): Promise<SlowResult> {
  const url = new URL(spec.req.url);
  const body = Buffer.from(spec.req.body);
  const head = [`POST ${url.pathname}${url.search} HTTP/1.1`, `host: ${url.host}`, ...Object.entries(spec.req.headers).map(([k, v]) => `${k}: ${v}`), `content-length: ${body.byteLength}`, "", ""].join("\r\n");
  const request = new Uint8Array(Buffer.concat([Buffer.from(head), body]));
  // Well past the answer's own length: a stream still open then is stuck, not slow.
  const timeoutMs = spec.chunks * spec.intervalMs * 3 + 60_000;
  const started = performance.now();
  let completed = 0;
  let stalled = 0;
  let failed = 0;
  const failures: string[] = [];
  const ttfbs: number[] = [];
  const durations: number[] = [];
  const gaps: number[] = [];
  let open = 0;
  let peakOpen = 0;
  let lastOpened = started;
  const one = async () => {
    let opened = false;
    try {
      const r = await readStream(url, request, timeoutMs, () => {
        opened = true;
        peakOpen = Math.max(peakOpen, ++open);
        lastOpened = performance.now();
      });
      if (r.contentChunks !== spec.chunks) throw new Error(`expected ${spec.chunks} content chunks, got ${r.contentChunks}`);
      completed++;
      ttfbs.push(r.ttfb);
      gaps.push(r.maxGap);
      if (r.maxGap > spec.intervalMs * 2) stalled++;
      durations.push(r.duration);
    } catch (err) {
      failed++;
      if (failures.length < 10) failures.push(String(err));
    } finally {
      if (opened) open--;
    }
  };
  const progress = setInterval(() => log(`slow: ${open} open, ${completed} complete, ${failed} failed of ${spec.streams}`), 5_000);
  const all: Promise<void>[] = [];
  // Opened in slices every 50 ms at `openPerSecond`, or all at once.
  const slice = spec.openPerSecond ? Math.max(1, Math.round(spec.openPerSecond / 20)) : spec.streams;
  for (let i = 0; i < spec.streams; i += slice) {
    for (let k = i; k < Math.min(spec.streams, i + slice); k++) all.push(one());
    if (i + slice < spec.streams) await Bun.sleep(50);
  }
  await Promise.all(all);
  clearInterval(progress);
  const g = sortNum(gaps);
  const t = sortNum(ttfbs);
  const d = sortNum(durations);
  return {
    streams: spec.streams,
    completed,
    failed,
    failures,
    stalled,
    peak_open_at_client: peakOpen,
    max_gap_ms: g.length ? g[g.length - 1]! : NaN,
    gap_p50_ms: pct(g, 50),
    gap_p99_ms: pct(g, 99),
    ttfb_p50_ms: pct(t, 50),
    ttfb_max_ms: t.length ? t[t.length - 1]! : NaN,
    duration_p50_ms: pct(d, 50),
    duration_max_ms: d.length ? d[d.length - 1]! : NaN,
    wall_s: (performance.now() - started) / 1000,
    opened_in_s: (lastOpened - started) / 1000,
  };
}

/** E: a long mixed run; one request in five is a stream whose client goes away midway. */
async function soak(spec: Extract<ClientSpec, { task: "soak" }>) {
  const user = (text: string) => [{ role: "user", content: text }];
  const openaiHeaders = { authorization: `Bearer ${spec.key}`, "content-type": "application/json" };
  const anthropicHeaders = { "x-api-key": spec.key, "anthropic-version": "2023-06-01", "content-type": "application/json" };
  const n = spec.chunks;
  const kinds = [
    // 0: streaming client that goes away after a few chunks (OpenAI upstream / Anthropic upstream, alternately)
    { name: "abort", path: "/v1/chat/completions", headers: openaiHeaders, stream: true, abort: true },
    // 1: OpenAI client → OpenAI upstream, streamed in full
    { name: "stream_openai", path: "/v1/chat/completions", headers: openaiHeaders, stream: true, body: JSON.stringify({ model: "bench/gpt", messages: user("soak stream"), max_tokens: n, stream: true }), end: "data: [DONE]" },
    // 2: OpenAI client → Anthropic upstream (translated), streamed in full
    { name: "stream_translated", path: "/v1/chat/completions", headers: openaiHeaders, stream: true, body: JSON.stringify({ model: "bench/claude", messages: user("soak translated"), max_tokens: n, stream: true, stream_options: { include_usage: true } }), end: "data: [DONE]" },
    // 3: OpenAI client, non-stream
    { name: "json_openai", path: "/v1/chat/completions", headers: openaiHeaders, stream: false, body: JSON.stringify({ model: "bench/gpt", messages: user("soak json"), max_tokens: n }) },
    // 4: Anthropic client → Anthropic upstream, non-stream
    { name: "json_anthropic", path: "/v1/messages", headers: anthropicHeaders, stream: false, body: JSON.stringify({ model: "bench/claude", messages: user("soak messages"), max_tokens: n }) },
  ];
  const abortBodies = [
    JSON.stringify({ model: "bench/gpt-drip", messages: user("soak abort"), max_tokens: n, stream: true }),
    JSON.stringify({ model: "bench/claude-drip", messages: user("soak abort translated"), max_tokens: n, stream: true }),
  ];
  const counts: Record<string, number> = {};
  const errors: Record<string, number> = {};
  const samples: string[] = [];
  let abortedMidway = 0;
  let endedBeforeAbort = 0;
  const bump = (m: Record<string, number>, k: string) => (m[k] = (m[k] ?? 0) + 1);
  const error = (kind: string, msg: string) => {
    bump(errors, kind);
    if (samples.length < 10) samples.push(`${kind}: ${msg}`);
  };

  const one = async (i: number) => {
    const k = kinds[i % kinds.length]!;
    const url = spec.gateway + k.path;
    try {
      if (k.abort) {
        const controller = new AbortController();
        const res = await fetch(url, { method: "POST", headers: k.headers, body: abortBodies[(i / kinds.length) & 1], signal: controller.signal });
        if (res.status !== 200) throw new Error(`status ${res.status}`);
        const reader = res.body!.getReader();
        let frames = 0;
        let text = "";
        // Go away once a few content chunks have arrived: midway through a 2 ms-per-chunk answer.
        while (frames < 4) {
          const { value, done } = await reader.read();
          if (done) break;
          text += dec.decode(value, { stream: true });
          frames = text.split("\n\n").length - 1;
        }
        if (text.includes("[DONE]")) endedBeforeAbort++;
        else abortedMidway++;
        controller.abort();
        await reader.cancel().catch(() => {});
        bump(counts, k.name);
        return;
      }
      const res = await fetch(url, { method: "POST", headers: k.headers, body: k.body });
      const text = await res.text();
      if (res.status !== 200) throw new Error(`status ${res.status}: ${text.slice(0, 160)}`);
      if (k.stream ? !text.trimEnd().endsWith(k.end!) : !text.trimEnd().endsWith("}")) throw new Error(`incomplete answer: ${text.slice(-80)}`);
      bump(counts, k.name);
    } catch (err) {
      error(k.name, String(err));
    }
  };

  let next = 0;
  let done = 0;
  const checkpoints: { requests: number; rss_mb: number; t_s: number }[] = [];
  const started = performance.now();
  const run = async (until: number) => {
    const worker = async () => {
      while (next < until) {
        const i = next++;
        await one(i);
        done++;
        if (done % spec.checkpoint === 0) {
          checkpoints.push({ requests: done, rss_mb: rssKb(spec.gatewayPid) / 1024, t_s: (performance.now() - started) / 1000 });
          log(`soak: ${done}/${spec.total} requests, gateway RSS ${(rssKb(spec.gatewayPid) / 1024).toFixed(1)} MB`);
        }
      }
    };
    await Promise.all(Array.from({ length: spec.concurrency }, worker));
  };

  await run(spec.warmup);
  // RSS after warm-up, measured idle the same way as the end one (see idleRssKb).
  const rssAfterWarmupKb = await idleRssKb(spec.gatewayPid);
  const measuredFrom = performance.now();
  await run(spec.total);
  const seconds = (performance.now() - measuredFrom) / 1000;
  return {
    total: spec.total,
    warmup: spec.warmup,
    concurrency: spec.concurrency,
    completed: counts,
    errors,
    error_samples: samples,
    aborted_midway: abortedMidway,
    ended_before_abort: endedBeforeAbort,
    rss_after_warmup_mb: rssAfterWarmupKb / 1024,
    checkpoints,
    seconds_after_warmup: seconds,
    requests_per_s: (spec.total - spec.warmup) / seconds,
  };
}

const spec = JSON.parse(readFileSync(process.argv[2]!, "utf8")) as ClientSpec;
const result = spec.task === "alternate" ? await alternate(spec) : spec.task === "slow" ? await slow(spec) : await soak(spec);
process.stdout.write(JSON.stringify(result) + "\n");
process.exit(0);
