import { cappedStream } from "../transport.ts";
import { fieldValue, ResponseFramingError, withoutField } from "./response-parser.ts";

const FORMATS: Record<string, string> = { gzip: "gzip", "x-gzip": "gzip", deflate: "deflate", br: "brotli", zstd: "zstd" };

/** The answer's content coding, lower-cased; undefined for none or identity. */
export function contentCoding(fields: readonly string[]): string | undefined {
  const encoding = fieldValue(fields, "content-encoding")?.trim().toLowerCase();
  return !encoding || encoding === "identity" ? undefined : encoding;
}

/**
 * We ask for identity; a server that compresses anyway is decoded, and the answer says so no
 * more (`decodedFields`). The cap counts decoded bytes: a small compressed body can inflate a thousandfold.
 * Bun's DecompressionStream yields its output in pieces as they are read, so inflating stops
 * when reading stops.
 */
export function decodedBody(stream: ReadableStream<Uint8Array>, coding: string, maxBytes: number): ReadableStream<Uint8Array> {
  const format = FORMATS[coding];
  if (!format) throw new ResponseFramingError(`unsupported content-encoding ${coding}`);
  const source = stream.getReader();
  /** The connection's own failure (lost, cut, framing), which reaches the decoded reader as it is. */
  let failed = false;
  const watched = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { done, value } = await source.read();
        if (done) controller.close();
        else controller.enqueue(value);
      } catch (err) {
        failed = true;
        throw err;
      }
    },
    cancel: (reason) => source.cancel(reason),
  }, { highWaterMark: 0 });
  const decoded = format === "deflate" ? inflated(watched) : watched.pipeThrough(decompressor(format));
  return cappedStream(decoded, maxBytes, (err) =>
    // Any other failure is the decoder's: bytes that are not the coding the answer names. Passed on
    // as Bun's TypeError ("inflate failed"), a stream told its client the connection was lost
    // (a raw-TCP probe, twenty-first session); it is malformed data, as in a whole answer.
    failed ? err : new ResponseFramingError(`the body is not the ${coding} its content-encoding names`));
}

// Bun's names ("brotli", "zstd", "deflate-raw") are wider than the DOM typings.
const decompressor = (format: string) => new DecompressionStream(format as "gzip") as unknown as ReadableWritablePair<Uint8Array, Uint8Array>;

/** Whether a deflate body's first two bytes make a zlib header (compression method 8, a check making them a multiple of 31); else it is raw RFC 1951 data. */
export function zlibWrapped(first: number, second: number): boolean {
  return (first & 0x0f) === 8 && ((first << 8) | second) % 31 === 0;
}

/**
 * `deflate` is RFC 1950's zlib stream, but servers have long sent raw RFC 1951 deflate under that
 * name, and browsers and curl read both. The first two bytes tell: a zlib header has compression
 * method 8 and a check making it a multiple of 31. A raw body under `deflate` was a free 502 (a
 * raw-TCP probe, thirty-fourth session).
 */
function inflated(stream: ReadableStream<Uint8Array>): ReadableStream<Uint8Array> {
  const source = stream.getReader();
  let decoded: { read(): Promise<{ done: boolean; value?: Uint8Array }>; cancel(reason?: unknown): Promise<void> } | undefined;
  const start = async () => {
    const head: Uint8Array[] = [];
    let have = 0;
    let done = false;
    while (have < 2 && !done) {
      const r = await source.read();
      if (r.done) done = true;
      else if (r.value.length > 0) {
        head.push(r.value);
        have += r.value.length;
      }
    }
    const first = head[0]?.[0] ?? 0;
    const second = (head[0]?.length ?? 0) > 1 ? head[0]![1]! : (head[1]?.[0] ?? 0);
    const zlib = zlibWrapped(first, second);
    const replay = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const chunk of head) controller.enqueue(chunk);
        if (done) controller.close();
      },
      async pull(controller) {
        const r = await source.read();
        if (r.done) controller.close();
        else controller.enqueue(r.value);
      },
      cancel: (reason) => source.cancel(reason),
    }, { highWaterMark: 0 });
    return replay.pipeThrough(decompressor(zlib ? "deflate" : "deflate-raw")).getReader();
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      decoded ??= await start();
      const r = await decoded.read();
      if (r.done) controller.close();
      else controller.enqueue(r.value);
    },
    cancel: (reason) => (decoded ? decoded.cancel(reason) : source.cancel(reason)),
  }, { highWaterMark: 0 });
}

/** A decoded answer's fields: neither its coding nor its length (of the coded bytes) holds any more. */
export function decodedFields(fields: readonly string[]): string[] {
  return withoutField(withoutField(fields, "content-encoding"), "content-length");
}
