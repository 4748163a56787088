import { describe, expect, test } from "bun:test";
import type { Logger } from "../../src/log/log.ts";
import { createEmbeddingsThread, EMBEDDINGS_THREAD_BYTES } from "../../src/formats/openai-embeddings/embeddings-thread.ts";
import { fakeEmbedding, fakeEmbeddingBase64, useFakeUpstream, type Reply } from "../helpers/fake-upstream.ts";
import { post, useGateway, VENDOR_OPENAI_KEY, type Gateway } from "../helpers/gateway.ts";
import { until } from "../helpers/until.ts";
import { watchLoopStall } from "../helpers/loop-stall.ts";

/*
 * Large embeddings answers (past EMBEDDINGS_THREAD_BYTES) are parsed, checked and written on the
 * embeddings thread. Two gateways share one fake upstream: `gw` as it runs, and `here`, which reads
 * every answer on the request thread (the threshold at Infinity: the code path every answer took
 * before the thread). The same upstream bytes must come out of both the same, byte for byte, with
 * the same charge; the same malformed bytes must be refused the same way; and while `gw`'s thread
 * works, its request thread answers others.
 */

const EMBED = "test/embed";
const EMBED_BACKUP = "test/embed-backup";
const PRICE = 20; // micro-credits per token
const BACKUP_PRICE = 130;
const embeddingModels = [
  { id: EMBED, provider: "fake-openai", upstream_model: "text-embedding-3-small", category: "embedding", context_length: 8192, pricing: { input_per_mtok: PRICE, output_per_mtok: 0 } },
  { id: EMBED_BACKUP, provider: "fake-openai", upstream_model: "text-embedding-3-large", category: "embedding", context_length: 8192, pricing: { input_per_mtok: BACKUP_PRICE, output_per_mtok: 0 } },
];

type Line = { message: string; fields: Record<string, unknown> };
const lines: Record<"gw" | "here", Line[]> = { gw: [], here: [] };
const capture = (into: Line[]): Logger => (_level, message, fields) => into.push({ message, fields: JSON.parse(JSON.stringify(fields ?? {})) });

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, extraModels: embeddingModels, retry: { max_retries: 0 }, log: capture(lines.gw) }));
const here = useGateway(() => ({
  upstreamUrl: upstream.url,
  extraModels: embeddingModels,
  retry: { max_retries: 0 },
  log: capture(lines.here),
  embeddingsThread: createEmbeddingsThread({ thresholdBytes: Number.POSITIVE_INFINITY }),
}));

/** Inputs and dimensions of the answers below: 256 × 1024 is ~5 MB of floats, ~1.4 MB of base64. */
const INPUTS = 256;
const DIMENSIONS = 1024;
const inputs = (n = INPUTS) => Array.from({ length: n }, (_, i) => `input number ${i}`);

interface AnswerShape {
  encoding: "float" | "base64";
  /** The upstream's count (default 777), or none the meter takes (absent, or null), which it then estimates. */
  usage?: number | "absent" | "null";
  /** `usage` (null) first and an extra field last, items out of order: the answer's own layout kept. */
  reordered?: boolean;
  /** Edits the items before they are written (malformed answers). */
  edit?: (data: { object: string; index: number; embedding: number[] | string }[]) => void;
  n?: number;
}

/** An OpenAI embeddings body, compact, one vector per input. */
function vendorAnswer(shape: AnswerShape): string {
  const n = shape.n ?? INPUTS;
  const data = inputs(n).map((text, index) => {
    const vector = fakeEmbedding(text, DIMENSIONS);
    return { object: "embedding", index, embedding: shape.encoding === "base64" ? fakeEmbeddingBase64(vector) : vector };
  });
  shape.edit?.(data);
  const usage = shape.usage === "null" ? null : { prompt_tokens: shape.usage ?? 777, total_tokens: shape.usage ?? 777 };
  if (shape.reordered) {
    return JSON.stringify({ usage, object: "list", data: [...data].reverse(), model: "text-embedding-3-small", x_vendor: { region: "eu", cost: 0.25 } });
  }
  return JSON.stringify({ object: "list", data, model: "text-embedding-3-small", ...(shape.usage === "absent" ? {} : { usage }) });
}

const asJson = (body: string): Reply => ({ kind: "text", headers: { "content-type": "application/json" }, body });
/** Sent in 256 KB pieces without a Content-Length (chunked): the answer crosses the threshold while it arrives. */
const inPieces = (body: string): Reply => {
  const bytes = new TextEncoder().encode(body);
  const chunks: Uint8Array[] = [];
  for (let i = 0; i < bytes.length; i += 256 * 1024) chunks.push(bytes.subarray(i, i + 256 * 1024));
  return { kind: "sse", headers: { "content-type": "application/json" }, chunks };
};

type UsageRecord = { model: string; prompt_tokens: number; completion_tokens: number; estimated: number; cost_micro: number; status: string };
async function recordOf(g: Gateway, clientRequestId: string): Promise<UsageRecord | null> {
  await g.app.services.settled();
  return g.db
    .query<UsageRecord, [string]>("SELECT model, prompt_tokens, completion_tokens, estimated, cost_micro, status FROM usage_records WHERE client_request_id = ?")
    .get(clientRequestId);
}

interface Seen {
  status: number;
  contentType: string | null;
  text: string;
  record: UsageRecord | null;
  charged: number;
  /** What the gateway logged of an unreadable answer. */
  unreadable: unknown[];
}

/** One request to one gateway with `reply` queued upstream: what its client got and what it cost. */
async function ask(g: Gateway, name: "gw" | "here", id: string, body: Record<string, unknown>, reply: Reply): Promise<Seen> {
  upstream.reply(reply);
  const before = await g.balanceMicro();
  const from = lines[name].length;
  const res = await post(g, "/v1/embeddings", body, { "x-request-id": id });
  const text = await res.text();
  const record = await recordOf(g, id);
  const unreadable = lines[name].slice(from).filter((l) => l.message === "upstream sent an unreadable body").map((l) => l.fields.error);
  return { status: res.status, contentType: res.headers.get("content-type"), text, record, charged: before - (await g.balanceMicro()), unreadable };
}

/** The same request and upstream bytes through both gateways; `gw` must have read it on its thread. */
async function both(id: string, body: Record<string, unknown>, reply: () => Reply): Promise<{ thread: Seen; here: Seen }> {
  const read = gw.app.services.embeddingsThread.answersRead;
  const thread = await ask(gw, "gw", `${id}-gw`, body, reply());
  expect(gw.app.services.embeddingsThread.answersRead).toBe(read + 1);
  const reference = await ask(here, "here", `${id}-here`, body, reply());
  expect(here.app.services.embeddingsThread.answersRead).toBe(0);
  return { thread, here: reference };
}

const decode = (b64: string) => {
  const bytes = Buffer.from(b64, "base64");
  return Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4));
};

describe("a large answer gives the client what a small one would", () => {
  const cases: { name: string; asks: "float" | "base64"; shape: AnswerShape; pieces?: boolean }[] = [
    { name: "float asked, floats sent", asks: "float", shape: { encoding: "float" } },
    { name: "base64 asked, floats sent (converted)", asks: "base64", shape: { encoding: "float" } },
    { name: "float asked, base64 sent (converted)", asks: "float", shape: { encoding: "base64" } },
    { name: "base64 asked, base64 sent", asks: "base64", shape: { encoding: "base64" } },
    { name: "no usage from the upstream: the meter's estimate is written in", asks: "float", shape: { encoding: "float", usage: "absent" } },
    { name: "usage null and first, a field after it, items out of order: estimated, the layout kept", asks: "base64", shape: { encoding: "base64", usage: "null", reordered: true } },
    { name: "usage first, reported, a field after it", asks: "float", shape: { encoding: "float", usage: 4321, reordered: true } },
    { name: "sent chunked, without a length: read on the thread from the piece that crosses the threshold", asks: "float", shape: { encoding: "float" }, pieces: true },
  ];

  for (const [i, c] of cases.entries()) {
    test(c.name, async () => {
      const answer = vendorAnswer(c.shape);
      expect(Buffer.byteLength(answer)).toBeGreaterThan(EMBEDDINGS_THREAD_BYTES);
      const { thread, here } = await both(`large-${i}`, { model: EMBED, input: inputs(), encoding_format: c.asks }, () => (c.pieces ? inPieces(answer) : asJson(answer)));

      expect(thread.status).toBe(200);
      // Byte for byte what the request thread writes, with the same headers and the same charge.
      expect(thread.text.length).toBe(here.text.length);
      expect(thread.text === here.text).toBe(true);
      expect(thread.contentType).toBe(here.contentType);
      expect(thread.contentType).toBe("application/json;charset=utf-8");
      expect(thread.record).toEqual(here.record);
      expect(thread.charged).toBe(here.charged);

      // And what that is: the gateway's model, the charged count, every vector in the asked encoding, in index order.
      const body = JSON.parse(thread.text) as { object: string; model: string; data: { index: number; embedding: number[] | string }[]; usage: { prompt_tokens: number; total_tokens: number } };
      const estimated = c.shape.usage === "absent" || c.shape.usage === "null";
      const tokens = estimated ? thread.record!.prompt_tokens : (c.shape.usage as number | undefined) ?? 777;
      expect(thread.record).toMatchObject({ model: EMBED, prompt_tokens: tokens, completion_tokens: 0, estimated: estimated ? 1 : 0, cost_micro: tokens * PRICE, status: "ok" });
      expect(tokens).toBeGreaterThan(0);
      expect(body.usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens });
      expect(body.model).toBe(EMBED);
      expect(body.object).toBe("list");
      expect(body.data.map((d) => d.index)).toEqual(inputs().map((_, index) => index));
      for (const index of [0, 1, INPUTS - 1]) {
        const embedding = body.data[index]!.embedding;
        expect(c.asks === "base64" ? decode(embedding as string) : embedding).toEqual(fakeEmbedding(inputs()[index]!, DIMENSIONS));
      }
      if (c.shape.reordered) {
        // The upstream's layout: usage where it put it, its own field after the list.
        expect(Object.keys(body)).toEqual(["usage", "object", "data", "model", "x_vendor"]);
        expect(thread.text.endsWith(`"x_vendor":{"region":"eu","cost":0.25}}`)).toBe(true);
      }
    }, 30_000);
  }
});

describe("a vendor key in the vendor's own fields", () => {
  test("never reaches the client, from a large answer read on the thread as from a small one", async () => {
    const withKey = (n: number) => {
      const body = JSON.parse(vendorAnswer({ encoding: "base64", n })) as Record<string, unknown>;
      body.debug_info = { auth: `Bearer ${VENDOR_OPENAI_KEY}`, escaped: JSON.stringify(VENDOR_OPENAI_KEY) };
      return JSON.stringify(body);
    };
    const read = gw.app.services.embeddingsThread.answersRead;
    const large = await ask(gw, "gw", "leak-large", { model: EMBED, input: inputs(), encoding_format: "base64" }, asJson(withKey(INPUTS)));
    expect(gw.app.services.embeddingsThread.answersRead).toBe(read + 1);
    const small = await ask(gw, "gw", "leak-small", { model: EMBED, input: inputs(4), encoding_format: "base64" }, asJson(withKey(4)));
    for (const seen of [large, small]) {
      expect(seen.status).toBe(200);
      expect(seen.text).not.toContain(VENDOR_OPENAI_KEY);
      expect(JSON.parse(seen.text).debug_info.auth).toBe("Bearer [redacted]");
    }
  });
});

describe("a malformed large answer is refused as a small one is: 502, nothing charged", () => {
  const float = (edit?: AnswerShape["edit"], n?: number) => vendorAnswer({ encoding: "float", edit, n });
  const cases: { name: string; body: () => string }[] = [
    { name: "one vector short", body: () => float(undefined, INPUTS - 1) },
    { name: "an index repeated", body: () => float((data) => (data[7]!.index = 3)) },
    { name: "an index missing (one past the end)", body: () => float((data) => (data[7]!.index = INPUTS)) },
    { name: "vector lengths mixed", body: () => float((data) => (data[9]!.embedding as number[]).pop()) },
    { name: "a number that is not finite", body: () => float((data) => ((data[11]!.embedding as number[])[5] = 123456.5)).replace("123456.5", "1e999") },
    { name: "base64 that is not", body: () => vendorAnswer({ encoding: "base64", edit: (data) => (data[2]!.embedding = "not base64!") }) },
    { name: "not JSON (cut short)", body: () => float().slice(0, -20) },
    {
      name: "an error object in a 200 (with the vendor key in it)",
      body: () => JSON.stringify({ error: { message: `quota exceeded for ${VENDOR_OPENAI_KEY}; ${"details ".repeat(200_000)}`, type: "insufficient_quota" } }),
    },
  ];

  for (const [i, c] of cases.entries()) {
    test(c.name, async () => {
      const answer = c.body();
      expect(Buffer.byteLength(answer)).toBeGreaterThan(EMBEDDINGS_THREAD_BYTES);
      const { thread, here } = await both(`broken-${i}`, { model: EMBED, input: inputs(), encoding_format: "float" }, () => asJson(answer));
      expect(thread.status).toBe(502);
      expect(JSON.parse(thread.text)).toEqual(JSON.parse(here.text));
      expect((JSON.parse(thread.text) as { error: { message: string } }).error.message).toContain("unreadable answer");
      expect([thread.charged, here.charged]).toEqual([0, 0]);
      expect(thread.record).toMatchObject({ cost_micro: 0, prompt_tokens: 0, status: "upstream_error" });
      // The same reason logged, a vendor's words scrubbed the same way.
      expect(thread.unreadable).toHaveLength(1);
      expect(thread.unreadable).toEqual(here.unreadable);
      expect(JSON.stringify(thread.unreadable)).not.toContain(VENDOR_OPENAI_KEY);
    }, 30_000);
  }

  test("the next model in `models` is asked, and only it is charged", async () => {
    upstream.reply(asJson(float((data) => (data[0]!.index = 1))));
    upstream.reply(asJson(vendorAnswer({ encoding: "float", usage: 500 })));
    const before = await gw.balanceMicro();
    const read = gw.app.services.embeddingsThread.answersRead;
    const res = await post(gw, "/v1/embeddings", { model: EMBED, models: [EMBED_BACKUP], input: inputs(), encoding_format: "float" });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { model: string; data: unknown[] };
    expect([body.model, body.data.length]).toEqual([EMBED_BACKUP, INPUTS]);
    expect(upstream.requests.filter((r) => r.path === "/v1/embeddings").map((r) => r.body.model)).toEqual(["text-embedding-3-small", "text-embedding-3-large"]);
    expect(before - (await gw.balanceMicro())).toBe(500 * BACKUP_PRICE);
    // Both answers were read on the thread: the refused one, then the one that answered.
    expect(gw.app.services.embeddingsThread.answersRead).toBe(read + 2);
  }, 30_000);
});

describe("while a large answer is handled, the request thread answers others", () => {
  /** 1,024 vectors of 1,024 floats: ~21 MB, read in pieces (past the transport's whole-answer size). */
  const BIG_INPUTS = 1024;
  let big: string | undefined;
  const bigAnswer = () => (big ??= JSON.stringify({
    object: "list",
    data: inputs(BIG_INPUTS).map((text, index) => ({ object: "embedding", index, embedding: fakeEmbedding(text, DIMENSIONS) })),
    model: "text-embedding-3-small",
    usage: { prompt_tokens: 9000, total_tokens: 9000 },
  }));

  /**
   * The large request through `g` (its client reads without parsing), with a 1 ms interval running:
   * the longest the request thread went without a turn, and the client's bytes. `meanwhile` runs
   * once the answer is in the thread's hands (`gw` only).
   */
  async function largeRequest(g: Gateway, meanwhile?: () => Promise<void>): Promise<{ stall: number; bytes: Uint8Array[] }> {
    upstream.rule((req) => (req.path === "/v1/embeddings" && Array.isArray(req.body?.input) && req.body.input.length === BIG_INPUTS ? asJson(bigAnswer()) : undefined));
    const watch = watchLoopStall();
    try {
      const large = (async () => {
        const res = await post(g, "/v1/embeddings", { model: EMBED, input: inputs(BIG_INPUTS), encoding_format: "float" });
        expect(res.status).toBe(200);
        const bytes: Uint8Array[] = [];
        for await (const chunk of res.body!) bytes.push(chunk);
        return bytes;
      })();
      await meanwhile?.();
      const bytes = await large;
      return { stall: watch.longest, bytes };
    } finally {
      watch.stop();
      upstream.rule(undefined);
    }
  }

  test("a small request sent while the thread holds the large answer is answered before the thread is done with it; the loop's longest stall is a fraction of the request thread's", async () => {
    bigAnswer();
    const thread = gw.app.services.embeddingsThread;
    // The same answer read on the request thread: the one long stall every other request waited through.
    const inThread = await largeRequest(here);
    const text = (parts: Uint8Array[]) => Buffer.concat(parts).toString("utf8");

    // Up to three tries, the best kept. The loop watched is the test process's own, which also
    // runs the fake upstream and the client, and on a loaded 2-core machine the process is at
    // times not scheduled at all for 100 ms or more: one try can be unlucky. A gateway that parses
    // on the request thread is never lucky (the ordering fails, and the stall is the parse every
    // time), so the best of three still tells the two apart.
    const tries: { stall: number; stillWorking: number | undefined }[] = [];
    for (let i = 0; i < 3; i++) {
      let stillWorking: number | undefined;
      const threaded = await largeRequest(gw, async () => {
        await until("the large answer on the embeddings thread", 20_000, () => thread.working > 0, 1);
        const small = await post(gw, "/v1/embeddings", { model: EMBED, input: "a small request", dimensions: 8, encoding_format: "float" });
        expect(small.status).toBe(200);
        expect(((await small.json()) as { data: { embedding: number[] }[] }).data[0]!.embedding).toEqual(fakeEmbedding("a small request", 8));
        stillWorking = thread.working;
      });
      expect(text(threaded.bytes) === text(inThread.bytes)).toBe(true);
      tries.push({ stall: threaded.stall, stillWorking });
      if (stillWorking! > 0 && threaded.stall / inThread.stall < 0.5) break;
    }
    // Ordering: the thread still had the large answer when the small one had been answered in full.
    expect(Math.max(...tries.map((t) => t.stillWorking ?? 0))).toBeGreaterThan(0);
    // Relative, so a slow machine slows both: what is left with the thread is reading and writing
    // the bytes (a few tens of ms per 20 MB here), against parsing and printing them (hundreds).
    const best = Math.min(...tries.map((t) => t.stall));
    expect({ tries, inThread: inThread.stall, ratio: best / inThread.stall < 0.5 }).toMatchObject({ ratio: true });
  }, 60_000);
});
