import { afterAll, describe, expect, test } from "bun:test";
import { createEmbeddingsThread } from "../../../src/formats/openai-embeddings/embeddings-thread.ts";
import { embeddingsList, embeddingsUsage, float32Base64, WrittenEmbeddings } from "../../../src/formats/openai-embeddings/encode-embeddings.ts";
import { JsonText } from "../../../src/formats/common/json-text.ts";
import { SHAPES_ONLY } from "../../../src/log/scrub.ts";

/*
 * The embeddings thread on its own: bytes in, in any pieces, the text the request thread would
 * have written out (`Response.json` of `embeddingsList`), and a usage put in afterwards. The
 * gateway's own use of it, against real HTTP, is test/e2e/embeddings-large-answers.test.ts.
 */

const thread = createEmbeddingsThread();
afterAll(() => thread.stop());

const vectors = [
  [0.5, -0.25, 0.125],
  [1, 2, 3],
];
/** Non-ASCII in the upstream's own fields: a multi-byte character is split between pieces below. */
const upstream = (usage: unknown) => ({ object: "list", data: vectors.map((v, index) => ({ object: "embedding", index, embedding: v })), model: "modèle—ü 🧪", usage });
const sent = { input: ["a", "b"] };

/** The bytes in pieces of `size`, whatever they cut through. */
function pieces(text: string, size: number): Uint8Array[] {
  const bytes = new TextEncoder().encode(text);
  const out: Uint8Array[] = [];
  for (let i = 0; i < bytes.length; i += size) out.push(bytes.slice(i, i + size));
  return out;
}

async function read(text: string, size: number, encoding: "float" | "base64" = "float") {
  const sink = thread.reader(encoding).open(sent, "gw/model", SHAPES_ONLY)!;
  for (const piece of pieces(text, size)) sink.push(piece);
  return sink.finish();
}

/** What the request thread sends for the same answer: `Response.json` of the list. */
const inThread = (body: unknown, encoding: "float" | "base64", tokens: number) => Response.json(embeddingsList(body, "gw/model", encoding, embeddingsUsage(tokens))).text();

describe("the embeddings thread", () => {
  test("pieces of any size, split inside a character: the request thread's text, and the upstream's count as the events' usage", async () => {
    const body = upstream({ prompt_tokens: 12, total_tokens: 12 });
    for (const size of [1, 3, 7, 64, 1 << 20]) {
      for (const encoding of ["float", "base64"] as const) {
        const { json, events } = await read(JSON.stringify(body), size, encoding);
        expect(json).toBeInstanceOf(WrittenEmbeddings);
        expect(events).toEqual([{ type: "usage", inputTokens: 12, outputTokens: 0 }]);
        const answer = (await (json as WrittenEmbeddings).withUsage(12, "gw/model")) as JsonText;
        expect([size, encoding, answer.text]).toEqual([size, encoding, await inThread(body, encoding, 12)]);
      }
    }
    expect(JSON.parse(await inThread(body, "base64", 12)).data[0].embedding).toBe(float32Base64(vectors[0]!));
  });

  test("another count (the meter's estimate) is written in where the usage is, on the thread", async () => {
    for (const usage of [undefined, null, { prompt_tokens: "n/a" }]) {
      const body = upstream(usage);
      const { json, events } = await read(JSON.stringify(body), 5);
      expect(events).toEqual([{ type: "usage", inputTokens: undefined, outputTokens: 0 }]);
      const answer = await (json as WrittenEmbeddings).withUsage(4321, "gw/model");
      expect(answer.text).toBe(await inThread(body, "float", 4321));
    }
  });

  test("what the adapter refuses is refused, with its words; what is not JSON fails as JSON.parse does", async () => {
    const refused = async (text: string) => (await read(text, 16).catch((e: Error) => e)) as Error;
    expect((await refused(JSON.stringify({ ...upstream(null), data: upstream(null).data.slice(1) }))).message).toBe("the embeddings answer holds 1 vectors for 2 inputs");
    expect((await refused(JSON.stringify({ error: { message: "quota" } }))).message).toBe('the upstream answered 200 with an error: {"message":"quota"}');
    const notJson = await refused('{"object": "list", "data": [');
    expect(notJson.name).toBe("SyntaxError");
    expect(String(notJson)).toBe(String(((): unknown => {
      try {
        return JSON.parse('{"object": "list", "data": [');
      } catch (err) {
        return err;
      }
    })()));
  });

  test("a dropped answer is let go: the next one with its id space is unaffected, and an idle thread holds nothing", async () => {
    const sink = thread.reader("float").open(sent, "gw/model", SHAPES_ONLY)!;
    sink.push(new TextEncoder().encode('{"object":"list","da'));
    expect(thread.working).toBe(1);
    sink.drop();
    expect(thread.working).toBe(0);
    await expect(sink.finish()).rejects.toThrow("already finished or dropped");
    const { json } = await read(JSON.stringify(upstream({ prompt_tokens: 1, total_tokens: 1 })), 10);
    expect(json).toBeInstanceOf(WrittenEmbeddings);
    expect(thread.working).toBe(0);
  });

  test("a view into a larger buffer is copied, never moved from under the rest of it; a whole buffer is moved", async () => {
    const text = JSON.stringify(upstream({ prompt_tokens: 3, total_tokens: 3 }));
    const shared = new TextEncoder().encode(`xx${text}yy`);
    const sink = thread.reader("float").open(sent, "gw/model", SHAPES_ONLY)!;
    const length = shared.byteLength;
    sink.push(shared.subarray(2, length - 2));
    // Still all here, the neighbours included.
    expect(shared.byteLength).toBe(length);
    expect(new TextDecoder().decode(shared)).toBe(`xx${text}yy`);
    const { json } = await sink.finish();
    expect((json as WrittenEmbeddings).text).toBe(await inThread(JSON.parse(text), "float", 3));
    const whole = new TextEncoder().encode(text);
    const moved = thread.reader("float").open(sent, "gw/model", SHAPES_ONLY)!;
    moved.push(whole);
    expect(whole.byteLength).toBe(0);
    expect(((await moved.finish()).json as WrittenEmbeddings).text).toBe(await inThread(JSON.parse(text), "float", 3));
  });
});

describe("more than one thread", () => {
  test("answers in hand at once go to different threads, each written whole", async () => {
    const two = createEmbeddingsThread({ threads: 2 });
    try {
      const bodies = [upstream({ prompt_tokens: 1, total_tokens: 1 }), upstream({ prompt_tokens: 2, total_tokens: 2 }), upstream({ prompt_tokens: 3, total_tokens: 3 })];
      const sinks = bodies.map(() => two.reader("base64").open(sent, "gw/model", SHAPES_ONLY)!);
      expect(two.working).toBe(3);
      bodies.forEach((body, i) => pieces(JSON.stringify(body), 9).forEach((piece) => sinks[i]!.push(piece)));
      const written = await Promise.all(sinks.map((sink) => sink.finish()));
      for (const [i, { json }] of written.entries()) expect((json as WrittenEmbeddings).text).toBe(await inThread(bodies[i], "base64", i + 1));
      expect([two.working, two.answersRead]).toEqual([0, 3]);
    } finally {
      two.stop();
    }
  });
});

describe("a thread that cannot start", () => {
  test("the answer it held is unreadable, the failure is told once, and later answers are read on the request thread", async () => {
    const failures: string[] = [];
    const broken = createEmbeddingsThread({ url: new URL("./no-such-embeddings-worker.ts", import.meta.url), onFailure: (m) => failures.push(m) });
    const sink = broken.reader("float").open(sent, "gw/model", SHAPES_ONLY)!;
    expect(sink).toBeDefined();
    sink.push(new TextEncoder().encode(JSON.stringify(upstream(null))));
    await expect(sink.finish()).rejects.toThrow(/the embeddings thread (failed|exited)/);
    expect(failures).toHaveLength(1);
    // No thread is tried again: the attempt reads the next answer itself.
    expect(broken.reader("float").open(sent, "gw/model", SHAPES_ONLY)).toBeUndefined();
    expect(broken.working).toBe(0);
    broken.stop();
  });
});
