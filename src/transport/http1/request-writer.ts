import type { Socket } from "bun";

/** Where a request goes. */
export interface Target {
  /** The pool key: scheme, host and port. */
  origin: string;
  tls: boolean;
  hostname: string;
  port: number;
  requestLine: string;
}

/** The target of an http(s) URL; null for any other scheme. */
export function parseTarget(url: string): Target | null {
  const u = new URL(url);
  const tls = u.protocol === "https:";
  if (u.protocol !== "http:" && !tls) return null;
  return {
    origin: `${u.protocol}//${u.host}`,
    tls,
    hostname: u.hostname.startsWith("[") ? u.hostname.slice(1, -1) : u.hostname,
    port: Number(u.port || (tls ? 443 : 80)),
    requestLine: `POST ${u.pathname}${u.search} HTTP/1.1\r\nhost: ${u.host}\r\n`,
  };
}

/** CR or LF in a header would let a value start a new header or a new request. */
const BREAKS_HEADER = /[\r\n]/;

/**
 * A POST's bytes: request line, the caller's headers (framing headers are ours to set), and the
 * body with its length. Throws TypeError for a header that would break the framing.
 */
export function serializePost(target: Target, headers: Record<string, string>, body: string): string {
  let head = target.requestLine;
  let hasAccept = false;
  let hasEncoding = false;
  for (const name in headers) {
    const value = headers[name]!;
    if (BREAKS_HEADER.test(name) || BREAKS_HEADER.test(value)) throw new TypeError(`invalid header ${name}`);
    const lower = name.toLowerCase();
    if (lower === "host" || lower === "content-length" || lower === "connection" || lower === "transfer-encoding") continue;
    if (lower === "accept") hasAccept = true;
    else if (lower === "accept-encoding") hasEncoding = true;
    head += `${name}: ${value}\r\n`;
  }
  if (!hasAccept) head += "accept: */*\r\n";
  // Compression saves nothing on loopback or in a datacentre and costs CPU on every chunk.
  if (!hasEncoding) head += "accept-encoding: identity\r\n";
  return `${head}content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

/** Messages longer than this (in UTF-16 units) are encoded to bytes once rather than written as strings. */
const LARGE_MESSAGE_CHARS = 64 * 1024;

/** One request's bytes on their way out, through as many partial writes as the socket needs. */
export class RequestWriter {
  private unsent: string | Buffer | null;
  private unsentBytes: number;
  /** Some bytes have gone out: from here on, an answer may be ours. */
  started = false;

  constructor(message: string) {
    // A large message is encoded once, here: written as a string, a socket that takes part of it
    // (loopback takes about 2.5 MB at once) had it encoded again for the rest, after a first pass
    // to measure it (hostile-tenant probe, nineteenth session). Small ones stay strings: one write.
    this.unsent = message.length > LARGE_MESSAGE_CHARS ? Buffer.from(message) : message;
    this.unsentBytes = typeof this.unsent === "string" ? Buffer.byteLength(message) : this.unsent.byteLength;
  }

  get finished(): boolean {
    return this.unsent === null;
  }

  /** Writes what the socket takes; call again on drain. */
  write(socket: Socket<unknown>): void {
    while (this.unsent) {
      const n = socket.write(this.unsent);
      if (n <= 0) return;
      this.started = true;
      if (n >= this.unsentBytes) {
        this.unsent = null;
        return;
      }
      // Counts are bytes: what a partial write left of a string is cut from its bytes.
      this.unsent = (typeof this.unsent === "string" ? Buffer.from(this.unsent) : this.unsent).subarray(n);
      this.unsentBytes -= n;
    }
  }
}
