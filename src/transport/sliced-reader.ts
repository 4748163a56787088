import type { ChunkReader, ReadResult } from "./transport.ts";

/** A read past this is handed on in slices of it, each after the event loop had a turn. */
export const READ_SLICE_BYTES = 64 * 1024;

/** The slices waiting for their turn, every stream's: one a macrotask, in the order they asked. */
const turns: (() => void)[] = [];
let turning = false;

function nextTurn(): void {
  const turn = turns.shift();
  turning = turns.length > 0;
  if (turning) setImmediate(nextTurn);
  turn?.();
}

/**
 * One slice a turn of the loop across all streams, in the order they asked: bursts at once take
 * turns with each other and with everything else, rather than all their slices running back to
 * back in one pass over the immediates.
 */
function takeTurn(turn: () => void): void {
  turns.push(turn);
  if (turning) return;
  turning = true;
  setImmediate(nextTurn);
}

/**
 * A stream's upstream reads, none larger than `sliceBytes`: the rest of a large read waits for
 * the next macrotask. The stream pipeline parses, meters and writes a read in one synchronous
 * run, and one socket read can be ~512 KB (Bun's read size) when a vendor, a cache or a hostile
 * upstream sends frames in a burst: 47–92 ms of translation in one run under load, which every
 * other request on the process waited through. 64 KiB bounds a run to ~10 ms (docs/decisions.md).
 * A vendor streaming at model speed never fills a read this large, so its reads pass as they are,
 * at the cost of one comparison. The SSE parser takes any boundary, in a frame or a character.
 */
export function slicedReader(inner: ChunkReader, sliceBytes = READ_SLICE_BYTES): ChunkReader {
  return inner.readNow && inner.onReadable ? new SlicedFastReader(inner, sliceBytes) : new SlicedReader(inner, sliceBytes);
}

/** One object a stream, its methods shared: this sits on every stream's path. */
class SlicedReader implements ChunkReader {
  /** What is left of a large read, handed on a slice at a time. */
  protected rest: Uint8Array | undefined;
  /** A macrotask has passed since the last slice was handed on: the next may go. */
  protected due = false;
  private scheduled = false;
  protected ready: (() => void) | undefined;
  private waiting: ((read: ReadResult) => void) | undefined;

  /** `sliced`, bound once: `read()` is called for every chunk of a reader without `readNow`. */
  private readonly slicedRead = (read: ReadResult) => this.sliced(read);

  constructor(protected readonly inner: ChunkReader, private readonly sliceBytes: number) {}

  read(): Promise<ReadResult> {
    if (this.rest) {
      if (this.due) return Promise.resolve(this.nextSlice());
      this.schedule();
      return new Promise((resolve) => (this.waiting = resolve));
    }
    return this.inner.read().then(this.slicedRead);
  }

  cancel(reason?: unknown): Promise<void> {
    const waiting = this.waiting;
    this.rest = undefined;
    this.waiting = undefined;
    this.ready = undefined;
    // A read waiting for its turn ends as a stream reader's pending read does at a cancel.
    waiting?.({ done: true, value: undefined });
    return this.inner.cancel(reason);
  }

  protected sliced(read: ReadResult): ReadResult {
    return read.done || read.value.byteLength <= this.sliceBytes ? read : { done: false, value: this.cut(read.value) };
  }

  protected nextSlice(): ReadResult {
    const left = this.rest!;
    this.rest = undefined;
    return { done: false, value: this.cut(left) };
  }

  private cut(value: Uint8Array): Uint8Array {
    if (value.byteLength <= this.sliceBytes) return value;
    this.rest = value.subarray(this.sliceBytes);
    this.due = false;
    return value.subarray(0, this.sliceBytes);
  }

  protected schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    takeTurn(() => this.turn());
  }

  private turn(): void {
    this.scheduled = false;
    if (!this.rest) return;
    this.due = true;
    const take = this.waiting;
    const tell = this.ready;
    this.waiting = undefined;
    this.ready = undefined;
    if (take) take(this.nextSlice());
    else tell?.();
  }
}

/** The transport's own reader: `readNow` and `onReadable` too (stream-answer.ts waits with them). */
class SlicedFastReader extends SlicedReader {
  readNow(): ReadResult | undefined {
    if (this.rest) {
      if (this.due) return this.nextSlice();
      this.schedule();
      return undefined;
    }
    const read = this.inner.readNow!();
    return read && this.sliced(read);
  }

  onReadable(ready: () => void): void {
    if (!this.rest) return this.inner.onReadable!(ready);
    this.ready = ready;
    this.schedule();
  }
}
