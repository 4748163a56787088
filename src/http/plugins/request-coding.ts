import type { Duplex } from "node:stream";
import * as zlib from "node:zlib";
import { GatewayError } from "../../streaming/gateway-error.ts";
import { zlibWrapped } from "../../transport/http1/decode-body.ts";

/**
 * Request bodies sent compressed (`Content-Encoding`). Codex compresses its Responses requests
 * with zstd when its `enable_request_compression` feature is on, and HTTP clients may gzip; the
 * body was read as it came, so such a client was told "The request body is not valid UTF-8", or
 * a body labelled `br` that was not was taken as plain JSON (a hostile-tenant probe). A coding
 * the gateway reads is decoded here; any other is a 415 (RFC 9110 §8.4), as is a compressed body
 * where it is not decoded.
 */

/** The codings read, by their names in Content-Encoding (lower case). */
const DECODERS: Readonly<Record<string, (options: zlib.ZlibOptions) => Duplex>> = {
  gzip: (o) => zlib.createGunzip(o),
  "x-gzip": (o) => zlib.createGunzip(o),
  deflate: (o) => zlib.createInflate(o),
  br: (o) => zlib.createBrotliDecompress(o),
  zstd: (o) => (zlib as unknown as { createZstdDecompress(o: zlib.ZlibOptions): Duplex }).createZstdDecompress(o),
};

/** More layers than any client applies: each one is decoded within the body limit, but none needs three. */
const MAX_LAYERS = 2;

/**
 * The codings of the request's body in the order they were applied, `identity` left out (none:
 * the body is as it came). One the gateway cannot read is refused (415; the caller adds the
 * headers of a refusal before the body is read).
 */
export function requestCodings(request: Request): string[] {
  const header = request.headers.get("content-encoding");
  if (header === null) return [];
  const codings = header.split(",").map((c) => c.trim().toLowerCase()).filter((c) => c !== "" && c !== "identity");
  for (const coding of codings) {
    if (!(coding in DECODERS)) {
      throw new GatewayError(415, "invalid_request",
        `The request body's Content-Encoding ${JSON.stringify(coding.slice(0, 40))} is not one the gateway reads: send the body uncompressed, or as gzip, deflate, br or zstd.`);
    }
  }
  if (codings.length > MAX_LAYERS) {
    throw new GatewayError(415, "invalid_request", `The request body is compressed ${codings.length} times over; the gateway reads at most ${MAX_LAYERS} codings.`);
  }
  return codings;
}

/** A compressed body where the gateway does not decode one (no key's turn: token counts, the admin and console APIs). */
export function codingsNotRead(): GatewayError {
  return new GatewayError(415, "invalid_request",
    "A compressed request body (Content-Encoding) is read on the model routes only (chat completions, messages, responses, embeddings): send this one uncompressed.");
}

/**
 * The body decoded, layer by layer, no further than `maxBytes`: a stream decoder that is stopped
 * as soon as its output passes the limit, so a small bomb costs the gateway the limit's worth of
 * work, not its whole expansion (zlib's `maxOutputLength` in Bun decodes everything and then
 * refuses: 0.35 s of the request thread for a 1 MB gzip of 1 GB). Past it: 413; data that is not
 * what its coding says: 400.
 */
export async function decodeBody(bytes: Uint8Array, codings: readonly string[], maxBytes: number): Promise<Uint8Array> {
  let out = bytes;
  for (let i = codings.length - 1; i >= 0; i--) out = await decodeLayer(out, codings[i]!, maxBytes);
  return out;
}

/** 1 MiB output pieces: Bun's default 16 KiB made a 9 MB gzip take ~10 times as long (an event-loop turn each). */
const CHUNK_BYTES = 1 << 20;

function decodeLayer(input: Uint8Array, coding: string, maxBytes: number): Promise<Uint8Array> {
  // deflate as browsers read it (the response side does the same): the zlib wrapper when the first
  // two bytes make one, else raw RFC 1951 data.
  const wrapped = input.length >= 2 && zlibWrapped(input[0]!, input[1]!);
  const make = coding === "deflate" && !wrapped ? (o: zlib.ZlibOptions): Duplex => zlib.createInflateRaw(o) : DECODERS[coding]!;
  return new Promise((resolve, reject) => {
    const decoder = make({ chunkSize: CHUNK_BYTES });
    const parts: Buffer[] = [];
    let size = 0;
    let settled = false;
    const fail = (err: GatewayError) => {
      if (settled) return;
      settled = true;
      decoder.destroy();
      reject(err);
    };
    decoder.on("data", (piece: Buffer) => {
      if (settled) return;
      size += piece.length;
      if (size > maxBytes) return fail(new GatewayError(413, "request_too_large", `The request body decompresses to more than the limit of ${maxBytes} bytes.`));
      parts.push(piece);
    });
    decoder.on("error", () => fail(new GatewayError(400, "invalid_request", `The request body is not valid ${coding} data, as its Content-Encoding says it is.`)));
    decoder.on("end", () => {
      if (settled) return;
      settled = true;
      resolve(parts.length === 1 ? parts[0]! : Buffer.concat(parts, size));
    });
    decoder.end(input);
  });
}
