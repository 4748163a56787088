import { describe, expect, test } from "bun:test";
import { READ_SLICE_BYTES, slicedReader } from "../../../src/transport/sliced-reader.ts";
import type { ChunkReader, ReadResult } from "../../../src/transport/transport.ts";

/** A reader over queued reads, as the transport's: readNow for what is there, onReadable for the next. */
function queued(reads: Uint8Array[]): ChunkReader & { cancelled: unknown[] } {
  const cancelled: unknown[] = [];
  const next = (): ReadResult => {
    const value = reads.shift();
    return value ? { done: false, value } : { done: true, value: undefined };
  };
  return {
    cancelled,
    read: async () => next(),
    readNow: () => next(),
    onReadable: (ready) => ready(),
    cancel: async (reason) => void cancelled.push(reason),
  };
}

const bytes = (n: number, seed = 0) => Uint8Array.from({ length: n }, (_, i) => (i * 31 + seed) & 0xff);
const macrotask = () => new Promise<void>((resolve) => setImmediate(resolve));

describe("a stream's large upstream reads are handed on in slices, each after a turn of the event loop", () => {
  test("a read within the slice passes as it came (the same bytes, no copy)", () => {
    const small = bytes(READ_SLICE_BYTES);
    const reader = slicedReader(queued([small]));
    const read = reader.readNow!();
    expect(read!.value).toBe(small);
    expect(reader.readNow!()).toEqual({ done: true, value: undefined });
  });

  test("a 200 KiB read comes as 64, 64, 64 and 8 KiB; the rest only after a macrotask queued before it ran", async () => {
    const large = bytes(200 * 1024, 7);
    const reader = slicedReader(queued([large, bytes(10)]));
    const slices: Uint8Array[] = [];
    // A macrotask queued as each slice is taken: the next slice of the same read comes only after it ran.
    let ranSinceSlice = true;
    let waits = 0;
    for (;;) {
      const read = reader.readNow!();
      if (read === undefined) {
        waits++;
        await new Promise<void>((ready) => reader.onReadable!(ready));
        continue;
      }
      if (read.done) break;
      if (slices.length > 0 && slices.length < 4) expect(ranSinceSlice).toBe(true);
      slices.push(read.value);
      ranSinceSlice = false;
      setImmediate(() => (ranSinceSlice = true));
    }
    expect(slices.map((s) => s.byteLength)).toEqual([65_536, 65_536, 65_536, 8_192, 10]);
    expect(Buffer.concat(slices.slice(0, 4)).equals(Buffer.from(large))).toBe(true);
    expect(waits).toBe(3);
  });

  test("read() waits for the turn too, and gives the slices in order", async () => {
    const large = bytes(150 * 1024, 3);
    const reader = slicedReader(queued([large]));
    const first = await reader.read();
    let ranBetween = false;
    setImmediate(() => (ranBetween = true));
    const second = await reader.read();
    expect(ranBetween).toBe(true);
    const third = await reader.read();
    expect([first, second, third].map((r) => r.value!.byteLength)).toEqual([65_536, 65_536, 22_528]);
    expect(Buffer.concat([first.value!, second.value!, third.value!]).equals(Buffer.from(large))).toBe(true);
    expect(await reader.read()).toEqual({ done: true, value: undefined });
  });

  test("cancel drops the rest, cancels the upstream, and a turn after it tells no one", async () => {
    const inner = queued([bytes(300 * 1024), bytes(5)]);
    const reader = slicedReader(inner);
    expect(reader.readNow!()!.value!.byteLength).toBe(READ_SLICE_BYTES);
    expect(reader.readNow!()).toBeUndefined();
    let told = false;
    reader.onReadable!(() => (told = true));
    await reader.cancel("client left");
    await macrotask();
    await macrotask();
    expect(told).toBe(false);
    expect(inner.cancelled).toEqual(["client left"]);
  });

  test("a reader with read() only (fetch's) gets no readNow or onReadable of its own", async () => {
    const inner = queued([bytes(100 * 1024)]);
    const reader = slicedReader({ read: inner.read, cancel: inner.cancel });
    expect(reader.readNow).toBeUndefined();
    expect(reader.onReadable).toBeUndefined();
    expect((await reader.read()).value!.byteLength).toBe(READ_SLICE_BYTES);
    expect((await reader.read()).value!.byteLength).toBe(100 * 1024 - READ_SLICE_BYTES);
  });
});
