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
  // Bun's names ("brotli", "zstd") are wider than the DOM typings.
  const decoded = watched.pipeThrough(new DecompressionStream(format as "gzip") as unknown as ReadableWritablePair<Uint8Array, Uint8Array>);
  return cappedStream(decoded, maxBytes, (err) =>
    // Any other failure is the decoder's: bytes that are not the coding the answer names. Passed on
    // as Bun's TypeError ("inflate failed"), a stream told its client the connection was lost
    // (a raw-TCP probe, twenty-first session); it is malformed data, as in a whole answer.
    failed ? err : new ResponseFramingError(`the body is not the ${coding} its content-encoding names`));
}

/** A decoded answer's fields: neither its coding nor its length (of the coded bytes) holds any more. */
export function decodedFields(fields: readonly string[]): string[] {
  return withoutField(withoutField(fields, "content-encoding"), "content-length");
}
