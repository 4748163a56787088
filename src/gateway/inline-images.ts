import type { StreamEvent } from "../streaming/events.ts";
import { ResponseTooLargeError, type Transport } from "../transport/transport.ts";
import { sniffImageType } from "../providers/image-type.ts";

/** Why an image the upstream pointed at could not be used. Each fails the attempt as a 502 that costs nothing. */
export type ImageFailure =
  /** Not on the provider's host, or not a URL at all. */
  | "not_allowed"
  /** DNS failure, refused or reset connection. */
  | "unreachable"
  /** The image URL answered an error status. */
  | "status"
  /** A redirect to another origin. */
  | "redirect"
  /** More redirects within the origin than the gateway follows. */
  | "redirect_loop"
  | "timeout"
  | "too_large"
  /** The bytes (or the declared type) are not a PNG, JPEG, GIF or WebP. */
  | "not_image";

/**
 * An image that cannot go into the answer. `message` is for the log (it may name the URL);
 * `clientMessage` is what the client is told and names nothing of the upstream.
 */
export class ImageFetchError extends Error {
  constructor(
    readonly reason: ImageFailure,
    message: string,
    readonly status?: number,
  ) {
    super(message);
  }

  get clientMessage(): string {
    switch (this.reason) {
      case "too_large":
        return "The upstream provider made an image larger than the gateway accepts.";
      case "timeout":
        return "The upstream provider's image did not arrive in time.";
      case "unreachable":
        return "The upstream provider's image could not be downloaded.";
      case "status":
        return `The upstream provider's image could not be downloaded (status ${this.status}).`;
      case "redirect":
        return "The upstream provider's image URL redirects to another host, which the gateway does not follow.";
      case "redirect_loop":
        // Not "another host": a probe's loop within one origin was worded as one (twenty-third session).
        return `The upstream provider's image URL redirects more than ${MAX_IMAGE_REDIRECTS} times, which the gateway does not follow.`;
      default:
        return "The upstream provider sent an image the gateway could not use.";
    }
  }
}

/** The upstream made an image larger than the gateway inlines. */
export class ImageTooLargeError extends ImageFetchError {
  constructor(maxBytes: number) {
    super("too_large", `image larger than ${maxBytes} bytes`);
  }
}

export interface InlineOptions {
  /** Only images on the provider's own host are fetched: anything else could be a request forgery. */
  providerBaseUrl: string;
  maxBytes: number;
  /** For the whole download: connecting, every redirect and the body. */
  timeoutMs: number;
  fetch: Transport;
  /** Aborts the download (the client went away). */
  signal?: AbortSignal;
}

/** Redirects within the image URL's own origin (a file id resolving to its path) are followed this many times. */
export const MAX_IMAGE_REDIRECTS = 3;

/** Declared types an image may come with; anything else (an HTML error page served with 200) is refused unread. */
const IMAGE_CONTENT_TYPE = /^\s*(?:image\/|application\/octet-stream|binary\/octet-stream)/i;

/**
 * Turns every image event into a checked data: URI, in place: data URIs are size-checked and
 * retyped from their bytes; URLs on the provider's host are fetched under a size cap and a
 * timeout and inlined. Every failure, whatever the network threw, is an ImageFetchError.
 */
export async function inlineImages(events: StreamEvent[], o: InlineOptions): Promise<void> {
  for (const e of events) {
    if (e.type !== "image") continue;
    e.url = e.url.startsWith("data:") ? checkDataUri(e.url, o.maxBytes) : await fetchImage(e.url, o);
  }
}

const BASE64_DIGITS = /^[A-Za-z0-9+/]*$/;

/** Base64 throughout: padded to whole quads, or without its padding (which some encoders leave off). */
function isBase64(data: string): boolean {
  let end = data.length;
  while (end > 0 && end > data.length - 2 && data.charCodeAt(end - 1) === 61 /* = */) end--;
  const digits = end === data.length ? data : data.slice(0, end);
  if (!BASE64_DIGITS.test(digits) || digits.length % 4 === 1) return false;
  return end === data.length || data.length % 4 === 0;
}

function checkDataUri(uri: string, maxBytes: number): string {
  const comma = uri.indexOf(",");
  if (comma === -1 || !uri.slice(0, comma).endsWith(";base64")) throw new ImageFetchError("not_image", "image data URI is not base64");
  const data = uri.slice(comma + 1);
  // All of it base64, not only the start the type is read from: text after a valid image's first
  // bytes (`…)![x](https://tracker.example/p.gif)`) became markdown beside the image (a raw-TCP probe).
  if (!isBase64(data)) throw new ImageFetchError("not_image", "image data URI is not base64");
  const padding = data.endsWith("==") ? 2 : data.endsWith("=") ? 1 : 0;
  if (Math.floor((data.length * 3) / 4) - padding > maxBytes) throw new ImageTooLargeError(maxBytes);
  const type = sniffImageType(Buffer.from(data.slice(0, 24), "base64"));
  if (!type) throw new ImageFetchError("not_image", "image data is not a PNG, JPEG, GIF or WebP");
  return `data:${type};base64,${data}`;
}

async function fetchImage(url: string, o: InlineOptions): Promise<string> {
  let target: URL;
  try {
    target = new URL(url);
  } catch {
    throw new ImageFetchError("not_allowed", "image URL is not a URL");
  }
  const allowed = new URL(o.providerBaseUrl);
  if (target.host !== allowed.host || (target.protocol !== "https:" && target.protocol !== allowed.protocol)) {
    throw new ImageFetchError("not_allowed", "image URL is not on the provider's host");
  }
  const timeout = AbortSignal.timeout(o.timeoutMs);
  const signal = o.signal ? AbortSignal.any([timeout, o.signal]) : timeout;
  try {
    return await download(target, o.maxBytes, signal, o.fetch);
  } catch (err) {
    if (err instanceof ImageFetchError) throw err;
    // The transport's answer cap bit first (it is below the image cap): the image is too large.
    if (err instanceof ResponseTooLargeError) throw new ImageTooLargeError(o.maxBytes);
    // fetch rejects with a TypeError (DNS, refused, reset) or the signal's reason; the body's
    // reader with either, mid-image. None of them may escape as a 500.
    if (timeout.aborted) throw new ImageFetchError("timeout", `image download took longer than ${o.timeoutMs} ms`);
    throw new ImageFetchError("unreachable", `image download failed: ${err instanceof Error ? err.message : String(err)}`);
  }
}

async function download(start: URL, maxBytes: number, signal: AbortSignal, fetch: Transport): Promise<string> {
  let target = start;
  let res: Response;
  for (let hops = 0; ; hops++) {
    // Redirects are handled here, not by fetch: one to another host could reach our own network.
    res = await untilAborted(fetch(target.href, { method: "GET", signal, redirect: "manual" }), signal);
    if (res.status < 300 || res.status > 399) break;
    res.body?.cancel().catch(() => {});
    const location = res.headers.get("location");
    let next: URL | undefined;
    try {
      next = location ? new URL(location, target) : undefined;
    } catch {}
    if (!next || next.origin !== target.origin) throw new ImageFetchError("redirect", `image URL redirected (${res.status}) off its origin`, res.status);
    if (hops >= MAX_IMAGE_REDIRECTS) throw new ImageFetchError("redirect_loop", `image URL redirected more than ${MAX_IMAGE_REDIRECTS} times`, res.status);
    target = next;
  }
  if (!res.ok || !res.body) {
    res.body?.cancel().catch(() => {});
    throw new ImageFetchError("status", `image fetch answered ${res.status}`, res.status);
  }
  const declared = res.headers.get("content-type");
  if (declared && !IMAGE_CONTENT_TYPE.test(declared)) {
    res.body.cancel().catch(() => {});
    throw new ImageFetchError("not_image", `image URL answered content-type ${declared}`);
  }
  if (Number(res.headers.get("content-length") ?? 0) > maxBytes) {
    res.body.cancel().catch(() => {});
    throw new ImageTooLargeError(maxBytes);
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body) {
    size += chunk.byteLength;
    if (size > maxBytes) throw new ImageTooLargeError(maxBytes);
    chunks.push(chunk);
  }
  const bytes = Buffer.concat(chunks);
  const type = sniffImageType(bytes);
  if (!type) throw new ImageFetchError("not_image", "fetched file is not a PNG, JPEG, GIF or WebP");
  return `data:${type};base64,${bytes.toString("base64")}`;
}

/**
 * A fetch that ends when its signal does, whatever the transport does with the signal: a name
 * lookup that hangs (no resolver answering) is not always interrupted by an abort, and the
 * download's timeout must hold anyway.
 */
function untilAborted<T>(pending: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    pending.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (err) => {
        signal.removeEventListener("abort", onAbort);
        reject(err);
      },
    );
  });
}

/**
 * A whole answer's first `max` images, the rest dropped before anything fetches them: a request is
 * held for `max` (plan.ts, imagesHeld) and charged no more, so more would go out unpaid.
 */
export function keepImages(events: StreamEvent[], max: number): StreamEvent[] {
  let seen = 0;
  return events.filter((e) => e.type !== "image" || ++seen <= max);
}
