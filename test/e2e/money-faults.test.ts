import { describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { ANTHROPIC_MODEL, FREE_MODEL, OPENAI_MODEL, post, sseFrames, startGateway, type Gateway } from "../helpers/gateway.ts";
import { auditLedger } from "../../src/store/sqlite/audit.ts";
import { faultyLedger } from "../helpers/faulty-ledger.ts";

const upstream = useFakeUpstream();
const question = [{ role: "user", content: "Tell me something" }];
const ledgerOptions = { busyLimitMs: 300, retryMaxMs: 50, probeIntervalMs: 100 };

/** The usage record id behind an answer id (chatcmpl-X / msg_X → req_X). */
const recordId = (answerId: string) => `req_${answerId.replace(/^(chatcmpl-|msg_)/, "")}`;

/** One request as a client sees it: its status and, when it got the whole answer, the answer's id. */
async function ask(gw: Gateway, kind: "openai" | "anthropic", stream: boolean, model: string): Promise<{ status: number; completedId?: string }> {
  const path = kind === "openai" ? "/v1/chat/completions" : "/v1/messages";
  const res = await post(gw, path, { model, max_tokens: 200, messages: question, stream });
  const text = await res.text();
  if (res.status !== 200) return { status: res.status };
  if (!stream) return { status: 200, completedId: JSON.parse(text).id };
  const frames = sseFrames(text);
  const last = frames.at(-1);
  const complete = kind === "openai" ? last?.data === "[DONE]" : last?.event === "message_stop";
  const first = JSON.parse(frames[0]!.data);
  return { status: 200, completedId: complete ? (first.id ?? first.message?.id) : undefined };
}

function records(gw: Gateway): Map<string, { cost_micro: number; status: string; estimated: number; prompt_tokens: number; completion_tokens: number }[]> {
  const db = new Database(gw.dbPath, { readonly: true });
  try {
    const all = db.query<{ request_id: string; cost_micro: number; status: string; estimated: number; prompt_tokens: number; completion_tokens: number }, []>(
      "SELECT request_id, cost_micro, status, estimated, prompt_tokens, completion_tokens FROM usage_records",
    ).all();
    const byId = new Map<string, typeof all>();
    for (const r of all) byId.set(r.request_id, [...(byId.get(r.request_id) ?? []), r]);
    return byId;
  } finally {
    db.close();
  }
}

const ready = async (gw: Gateway) => (await fetch(`${gw.url}/ready`)).status;

describe("a ledger that cannot write never takes the gateway down", () => {
  for (const fault of [
    { name: "disk full", arm: (gw: Gateway) => gw.db.exec(`PRAGMA max_page_count = ${(gw.db.query("PRAGMA page_count").get() as { page_count: number }).page_count}`), disarm: (gw: Gateway) => gw.db.exec("PRAGMA max_page_count = 1073741823") },
    { name: "read-only database", arm: (gw: Gateway) => gw.db.exec("PRAGMA query_only = 1"), disarm: (gw: Gateway) => gw.db.exec("PRAGMA query_only = 0") },
  ]) {
    test(`${fault.name} mid-load: paid requests get 503 while it lasts, free ones keep working, nothing lost or doubled after recovery`, async () => {
      const gw = await startGateway({ upstreamUrl: upstream.url, credits: 10_000, ledgerOptions });
      try {
        const before = await gw.balanceMicro();
        expect(await ready(gw)).toBe(200);
        const outcomes: { paid: boolean; status: number; completedId?: string }[] = [];
        let phase: "before" | "fault" | "after" = "before";
        const statusesDuringFault = new Set<number>();
        let readyDuringFault = 0;
        const stopAt = performance.now() + 1_500;
        const worker = async (w: number) => {
          for (let i = 0; performance.now() < stopAt; i++) {
            const paid = (w + i) % 3 !== 0;
            const out = await ask(gw, (w + i) % 2 ? "openai" : "anthropic", i % 4 < 2, paid ? (w % 2 ? OPENAI_MODEL : ANTHROPIC_MODEL) : FREE_MODEL);
            outcomes.push({ paid, ...out });
            if (phase === "fault") statusesDuringFault.add(out.status * (paid ? 1 : -1));
          }
        };
        const load = Promise.all(Array.from({ length: 24 }, (_, w) => worker(w)));
        await Bun.sleep(200);
        fault.arm(gw);
        phase = "fault";
        // Records keep arriving until one needs a new page (a full disk) or at once (read-only).
        const deadline = performance.now() + 1_000;
        while (!statusesDuringFault.has(503) && performance.now() < deadline) await Bun.sleep(10);
        readyDuringFault = await ready(gw);
        await Bun.sleep(300);
        fault.disarm(gw);
        phase = "after";
        await load;

        expect(statusesDuringFault.has(503)).toBe(true); // paid requests refused…
        expect(statusesDuringFault.has(-200)).toBe(true); // …free ones served
        expect(readyDuringFault).toBe(503);
        expect(outcomes.every((o) => o.status === 200 || (o.status === 503 && o.paid))).toBe(true);
        // Service comes back by itself.
        const back = performance.now() + 5_000;
        while ((await ready(gw)) !== 200 && performance.now() < back) await Bun.sleep(20);
        expect(await ready(gw)).toBe(200);
        expect((await ask(gw, "openai", false, OPENAI_MODEL)).status).toBe(200);

        await gw.app.services.settled();
        const byId = records(gw);
        const completed = outcomes.filter((o) => o.completedId);
        expect(completed.length).toBeGreaterThan(50);
        for (const o of completed) {
          const found = byId.get(recordId(o.completedId!));
          expect(found).toHaveLength(1);
          if (o.paid) expect(found![0]!.cost_micro).toBeGreaterThan(0);
        }
        const charged = [...byId.values()].flat().reduce((n, r) => n + r.cost_micro, 0);
        expect(before - (await gw.balanceMicro())).toBe(charged);
        expect(auditLedger(gw.db).clean).toBe(true);
        expect(gw.app.services.ledger.openHolds()).toBe(0);
      } finally {
        await gw.stop();
      }
    }, 20_000);
  }

  // How fast the free requests stay meanwhile (p99 < 50 ms) is the bench's (bench/ledger-lock.ts).
  test("another connection holds the write lock: 200 free requests are all answered while it holds it, the paid ones wait for it, and everything is recorded once after", async () => {
    // A busy limit longer than the test: the paid requests wait for the lock rather than give up.
    const gw = await startGateway({ upstreamUrl: upstream.url, credits: 10_000, ledgerOptions: { busyLimitMs: 60_000, retryMaxMs: 50 } });
    const other = new Database(gw.dbPath);
    try {
      other.exec("BEGIN IMMEDIATE");
      const paid: Promise<{ status: number; completedId?: string }>[] = [];
      const free: { status: number; completedId?: string }[] = [];
      for (let i = 0; i < 200; i++) {
        if (i % 20 === 0) paid.push(ask(gw, "anthropic", true, ANTHROPIC_MODEL));
        free.push(await ask(gw, i % 2 ? "openai" : "anthropic", i % 3 === 0, FREE_MODEL));
      }
      // Every free request was answered in full before the lock was let go.
      expect(free.map((o) => o.status)).toEqual(Array(200).fill(200));
      expect(free.every((o) => o.completedId !== undefined)).toBe(true);
      // The paid ones cannot reserve while the lock is held: none has been answered yet.
      const early = await Promise.all(paid.map((p) => Promise.race([p.then(() => "answered"), Bun.sleep(0).then(() => "waiting")])));
      expect(early).toEqual(Array(10).fill("waiting"));
      other.exec("COMMIT");
      const paidOutcomes = await Promise.all(paid);
      expect(paidOutcomes.map((o) => o.status)).toEqual(Array(10).fill(200));
      expect(paidOutcomes.every((o) => o.completedId !== undefined)).toBe(true);
      await gw.app.services.settled();
      const byId = records(gw);
      for (const o of [...free, ...paidOutcomes].filter((p) => p.completedId)) expect(byId.get(recordId(o.completedId!))).toHaveLength(1);
      expect(auditLedger(gw.db).clean).toBe(true);
    } finally {
      other.close();
      await gw.stop();
    }
  }, 20_000);

  test("a ledger whose calls throw: reserve → 503, settle → the answer still arrives; the process stays up", async () => {
    let armed: ReturnType<typeof faultyLedger> | undefined;
    const gw = await startGateway({ upstreamUrl: upstream.url, wrapLedger: (l) => (armed = faultyLedger(l)).ledger });
    try {
      armed!.faults.reserveThrows = new Error("boom");
      const refused = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question });
      expect(refused.status).toBe(503);
      expect(((await refused.json()) as any).error.message).toContain("cannot record charges");
      armed!.faults.reserveThrows = undefined;
      armed!.faults.settleThrows = new Error("settle boom");
      for (const stream of [false, true]) expect((await ask(gw, "openai", stream, OPENAI_MODEL)).completedId).toBeDefined();
      armed!.faults.settleThrows = undefined;
      armed!.faults.refuse = true;
      expect((await post(gw, "/v1/messages", { model: FREE_MODEL, max_tokens: 10, messages: question })).status).toBe(503);
      expect(await ready(gw)).toBe(503);
      armed!.faults.refuse = false;
      expect((await ask(gw, "anthropic", true, ANTHROPIC_MODEL)).completedId).toBeDefined();
    } finally {
      await gw.stop();
    }
  });
});

describe("upstream usage is validated", () => {
  const gw = { current: undefined as Gateway | undefined };
  const broken: [string, unknown][] = [["{}", {}], ['"n/a"', "n/a"], ["-5", -5], ["1e12", 1e12], ["a float", 12.5], ["null", null]];
  const openaiUsage = (v: unknown) => (v !== null && typeof v === "object" ? v : { prompt_tokens: v, completion_tokens: v, total_tokens: v });
  const anthropicUsage = (v: unknown) => (v !== null && typeof v === "object" ? v : { input_tokens: v, output_tokens: v });

  for (const [name, value] of broken) {
    test(`usage ${name}: a clean charge from our estimate, marked estimated, on every path`, async () => {
      gw.current ??= await startGateway({ upstreamUrl: upstream.url, credits: 1_000 });
      const g = gw.current;
      const text = "Here is a perfectly ordinary answer of some words.";
      upstream.reply({ kind: "json", body: { id: "chatcmpl-up", object: "chat.completion", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, message: { role: "assistant", content: text }, finish_reason: "stop" }], usage: openaiUsage(value) } });
      upstream.reply({ kind: "sse", chunks: [
        `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":${JSON.stringify(text)}},"finish_reason":null}]}\n\n`,
        `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n`,
        `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":${JSON.stringify(openaiUsage(value))}}\n\n`,
        "data: [DONE]\n\n",
      ] });
      upstream.reply({ kind: "json", body: { id: "msg_up", type: "message", role: "assistant", model: "claude", content: [{ type: "text", text }], stop_reason: "end_turn", stop_sequence: null, usage: anthropicUsage(value) } });
      upstream.reply({ kind: "sse", chunks: [
        `event: message_start\ndata: {"type":"message_start","message":{"id":"msg_up","type":"message","role":"assistant","model":"claude","content":[],"stop_reason":null,"stop_sequence":null,"usage":${JSON.stringify(anthropicUsage(value))}}}\n\n`,
        `event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n`,
        `event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":${JSON.stringify(text)}}}\n\n`,
        `event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n`,
        `event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":${JSON.stringify(anthropicUsage(value))}}\n\n`,
        `event: message_stop\ndata: {"type":"message_stop"}\n\n`,
      ] });
      const ids: string[] = [];
      for (const [kind, stream, model] of [["openai", false, OPENAI_MODEL], ["openai", true, OPENAI_MODEL], ["anthropic", false, ANTHROPIC_MODEL], ["anthropic", true, ANTHROPIC_MODEL]] as const) {
        const out = await ask(g, kind, stream, model);
        expect(out.status).toBe(200);
        ids.push(recordId(out.completedId!));
      }
      await g.app.services.settled();
      const byId = records(g);
      for (const id of ids) {
        const [record] = byId.get(id)!;
        expect(record!.estimated).toBe(1);
        expect(record!.prompt_tokens).toBeGreaterThan(0);
        expect(record!.prompt_tokens).toBeLessThan(1_000);
        expect(record!.completion_tokens).toBeGreaterThan(5);
        expect(record!.completion_tokens).toBeLessThan(100);
        expect(record!.cost_micro).toBeGreaterThan(0);
        expect(record!.cost_micro).toBeLessThan(10_000_000);
      }
      expect(auditLedger(g.db).clean).toBe(true);
      if (name === "null") await g.stop();
    });
  }
});

describe("refusals cost nothing to store", () => {
  test("a key limited to 1 request a minute, flooded: one usage record, one counter row", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url, requestsPerMinute: 1 });
    try {
      const statuses = await Promise.all(Array.from({ length: 300 }, () => post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: question }).then(async (r) => (await r.arrayBuffer(), r.status))));
      expect(statuses.filter((s) => s === 200)).toHaveLength(1);
      expect(statuses.filter((s) => s === 429)).toHaveLength(299);
      await gw.app.services.settled();
      expect([...records(gw).values()].flat()).toHaveLength(1);
      const db = new Database(gw.dbPath, { readonly: true });
      try {
        const rows = db.query<{ key_id: string; status: number; count: number }, []>("SELECT key_id, status, count FROM rejection_counts").all();
        // Within one minute (or two if the test straddles a minute boundary).
        expect(rows.length).toBeLessThanOrEqual(2);
        expect(rows.every((r) => r.key_id === gw.keyId && r.status === 429)).toBe(true);
        expect(rows.reduce((n, r) => n + r.count, 0)).toBe(299);
      } finally {
        db.close();
      }
    } finally {
      await gw.stop();
    }
  });
});

describe("/health and /ready", () => {
  test("need no key, say ok and ready on a healthy gateway, and ready turns 503 while draining", async () => {
    const gw = await startGateway({ upstreamUrl: upstream.url });
    try {
      const health = await fetch(`${gw.url}/health`);
      expect(health.status).toBe(200);
      expect(await health.json()).toEqual({ status: "ok" });
      const readyRes = await fetch(`${gw.url}/ready`);
      expect(readyRes.status).toBe(200);
      expect(await readyRes.json()).toMatchObject({ status: "ready", draining: false, ledger: { writable: true, queued: 0 } });
      gw.app.services.drain();
      const draining = await fetch(`${gw.url}/ready`);
      expect(draining.status).toBe(503);
      expect(await draining.json()).toMatchObject({ status: "not_ready", draining: true });
    } finally {
      await gw.stop();
    }
  });
});
