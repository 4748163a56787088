import type { StreamEvent } from "../streaming/events.ts";
import type { UpstreamFetch } from "./forward.ts";

/** The upstream made an image larger than the gateway inlines; the request fails uncharged. */
export class ImageTooLargeError extends Error {}
/** The upstream pointed at something that is not an image it may serve us. */
export class ImageFetchError extends Error {}

export interface InlineOptions {
  /** Only images on the provider's own host are fetched: anything else could be a request forgery. */
  providerBaseUrl: string;
  maxBytes: number;
  timeoutMs: number;
  fetch: UpstreamFetch;
}

/** Image type from the first bytes; the declared type of a data URI or a response is not trusted. */
export function sniffImageType(bytes: Uint8Array): string | undefined {
  if (bytes[0] === 0x89 && bytes[1] === 0x50 && bytes[2] === 0x4e && bytes[3] === 0x47) return "image/png";
  if (bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return "image/jpeg";
  if (bytes[0] === 0x47 && bytes[1] === 0x49 && bytes[2] === 0x46) return "image/gif";
  if (bytes[0] === 0x52 && bytes[1] === 0x49 && bytes[2] === 0x46 && bytes[3] === 0x46 && bytes[8] === 0x57 && bytes[9] === 0x45 && bytes[10] === 0x42 && bytes[11] === 0x50) return "image/webp";
  return undefined;
}

/**
 * Turns every image event into a checked data: URI, in place: data URIs are size-checked and
 * retyped from their bytes; https URLs on the provider's host are fetched under a size cap and
 * a timeout and inlined.
 */
export async function inlineImages(events: StreamEvent[], o: InlineOptions): Promise<void> {
  for (const e of events) {
    if (e.type !== "image") continue;
    e.url = e.url.startsWith("data:") ? checkDataUri(e.url, o.maxBytes) : await fetchImage(e.url, o);
  }
}

function checkDataUri(uri: string, maxBytes: number): string {
  const comma = uri.indexOf(",");
  if (comma === -1 || !uri.slice(0, comma).endsWith(";base64")) throw new ImageFetchError("image data URI is not base64");
  const data = uri.slice(comma + 1);
  const padding = data.endsWith("==") ? 2 : data.endsWith("=") ? 1 : 0;
  if (Math.floor((data.length * 3) / 4) - padding > maxBytes) throw new ImageTooLargeError(`image larger than ${maxBytes} bytes`);
  const type = sniffImageType(Buffer.from(data.slice(0, 24), "base64"));
  if (!type) throw new ImageFetchError("image data is not a PNG, JPEG, GIF or WebP");
  return `data:${type};base64,${data}`;
}

async function fetchImage(url: string, o: InlineOptions): Promise<string> {
  let target: URL;
  try {
    target = new URL(url);
  } catch {
    throw new ImageFetchError("image URL is not a URL");
  }
  const allowed = new URL(o.providerBaseUrl);
  if (target.host !== allowed.host || (target.protocol !== "https:" && target.protocol !== allowed.protocol)) {
    throw new ImageFetchError("image URL is not on the provider's host");
  }
  const res = await o.fetch(target.href, { method: "GET", signal: AbortSignal.timeout(o.timeoutMs), redirect: "error" });
  if (!res.ok || !res.body) throw new ImageFetchError(`image fetch answered ${res.status}`);
  if (Number(res.headers.get("content-length") ?? 0) > o.maxBytes) {
    res.body.cancel().catch(() => {});
    throw new ImageTooLargeError(`image larger than ${o.maxBytes} bytes`);
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body) {
    size += chunk.byteLength;
    if (size > o.maxBytes) throw new ImageTooLargeError(`image larger than ${o.maxBytes} bytes`);
    chunks.push(chunk);
  }
  const bytes = Buffer.concat(chunks);
  const type = sniffImageType(bytes);
  if (!type) throw new ImageFetchError("fetched file is not a PNG, JPEG, GIF or WebP");
  return `data:${type};base64,${bytes.toString("base64")}`;
}
