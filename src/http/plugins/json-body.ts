import { Elysia } from "elysia";
import { isUtf8 } from "node:buffer";
import { clientClosed, GatewayError } from "../../streaming/gateway-error.ts";
import { giveShares, takeShares, type BodyShare, type ShareLevel } from "../../limits/body-budget.ts";
import { holdTurn, type ParseTurns } from "../../limits/parse-turns.ts";
import { noteDecodedBody } from "../../limits/body-bytes.ts";
import type { TSchema } from "@sinclair/typebox";
import { firstBodyError } from "./first-body-error.ts";
import { validationMessage, validationParam } from "./errors.ts";
import { codingsNotRead, decodeBody, requestCodings } from "./request-coding.ts";
import { jsonShape, MAX_JSON_CONTAINERS, MAX_JSON_DEPTH, MAX_JSON_MEMBERS, MAX_OBJECT_MEMBERS } from "../../formats/common/json-shape.ts";

/**
 * The body as text, or undefined when it is not valid UTF-8. Checked with `isUtf8` (simdutf) and
 * decoded by Buffer: a fatal TextDecoder took 7.3 ms for a 3.9 MB body of ASCII against 0.9 ms
 * for these two, on the request thread (hostile-tenant probe, nineteenth session). A leading
 * byte order mark is dropped, as TextDecoder drops it.
 */
export function strictUtf8(bytes: Uint8Array): string | undefined {
  if (!isUtf8(bytes)) return undefined;
  const start = bytes.length >= 3 && bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf ? 3 : 0;
  return Buffer.from(bytes.buffer, bytes.byteOffset + start, bytes.byteLength - start).toString("utf8");
}

/**
 * Bun's own `maxRequestBodySize`, where the server listens: none. Bun's cut answers a bare 413
 * without a body (not our JSON error), and our own checks leave it nothing to do: a declared
 * length over the cap is refused on arrival (plugins/admission.ts), every body that is read is
 * read here no further than the cap, and a body nobody reads is not buffered (Bun stops reading
 * the socket until someone does, and closes or drains it after the answer).
 */
export const SERVER_BODY_LIMIT = Number.MAX_SAFE_INTEGER;

/**
 * A refusal given while a body is still arriving closes the connection: without it Bun keeps
 * receiving (and discarding) the rest to reuse the connection, 60 MB of it for a client that
 * was refused at the first byte. Small bodies are cheaper to drain than a new connection.
 */
export const CLOSE_AFTER_UNREAD_BYTES = 64 * 1024;

/** Headers for a refusal answered before the request's body was read. */
export function unreadBodyHeaders(request: Request): Record<string, string> | undefined {
  const length = request.headers.get("content-length");
  const pending = length === null ? request.headers.has("transfer-encoding") : Number(length) > CLOSE_AFTER_UNREAD_BYTES;
  return pending ? { connection: "close" } : undefined;
}

/** How the body plugin bounds what it reads. */
export interface JsonBodyOptions {
  /** limits.max_body_bytes: a body over it is refused (413) as soon as it passes it. */
  maxBytes: number;
  /**
   * Where a body's bytes are counted while it arrives (limits/body-budget.ts): its key's and its
   * account's shares, or its client address's; none: not counted (the admin token's requests).
   */
  sharesOf?: (request: Request, server: BodyServer) => readonly BodyShare[] | undefined;
  /** limits.body_timeout_ms: a body must have arrived this long after its reading started (408). */
  timeoutMs?: number;
  /**
   * The schema of a route's body, by path: a large body that fails it is refused here, where the
   * first failure is found without walking the whole body (plugins/first-body-error.ts).
   */
  schemaOf?: (path: string) => TSchema | undefined;
  /**
   * Large bodies (over LARGE_BODY_BYTES) take turns to be parsed (limits/parse-turns.ts), by the
   * key and account `turnOf` names (none: no turn, the admin token's and anonymous requests).
   */
  turns?: ParseTurns;
  turnOf?: (request: Request) => { key: string; account: string } | undefined;
}

/** Bodies past this size are checked against their schema here; smaller ones cost Elysia's check little. */
export const LARGE_BODY_BYTES = 256 * 1024;

/** What the plugin needs of the server: the client's socket address (and its port: a connection's identity). */
export type BodyServer = { requestIP(request: Request): { address: string; port: number } | null; timeout?(request: Request, seconds: number): void } | null;

/**
 * Every request body, whatever its content type (or none), is read here and no further than
 * `maxBytes`: Elysia's own parsers (text, form, multipart, bytes) read whole bodies, bounded only
 * by Bun's `maxRequestBodySize`. Every route takes JSON, read strictly: invalid UTF-8 is refused
 * rather than silently turned into U+FFFD (which would send text to the model that the client
 * never wrote), and so is nesting deeper than MAX_JSON_DEPTH. A body of another type is read
 * (so that the cap holds while reading) and refused. Every failure is a 4xx in the client's shape.
 */
export function jsonBodyPlugin(o: JsonBodyOptions) {
  return new Elysia({ name: "switchyard/json-body" })
    .onParse({ as: "global" }, async ({ request, contentType, server }) => {
      // A compressed body is decoded only for a key's model requests, which take turns to parse:
      // its expansion is work the request thread does, like a large body's parse.
      let codings: string[];
      let keyTurn: { key: string; account: string } | undefined;
      try {
        // A coding named on a request without a body (a DELETE, say) says nothing: there is nothing to decode.
        codings = request.body === null || request.headers.get("content-length") === "0" ? [] : requestCodings(request);
        keyTurn = codings.length > 0 ? o.turnOf?.(request) : undefined;
        if (codings.length > 0 && !keyTurn) throw codingsNotRead();
      } catch (err) {
        throw err instanceof GatewayError ? err.withHeaders(unreadBodyHeaders(request)) : err;
      }
      const shares = o.sharesOf?.(request, server);
      const { bytes: sent, held } = await readBody(request, o, shares);
      // A large body keeps its share of the body budget until its turn has parsed it: a backlog
      // waiting for its turn is bounded by the same budget as bodies still arriving.
      let endTurn: (() => void) | undefined;
      /** Bytes the decoded body took from the shares, beside what the body as sent took. */
      let heldDecoded = 0;
      try {
        const compressed = codings.length > 0 && sent.length > 0;
        const turn = (sent.length > LARGE_BODY_BYTES || compressed) && o.turns ? keyTurn ?? o.turnOf?.(request) : undefined;
        if (turn) {
          endTurn = await o.turns!.take(turn.key, turn.account);
          // A client that left while its body waited: the turn goes to the next at once, the body unparsed.
          if (request.signal.aborted) throw clientClosed();
        }
        let bytes = sent;
        if (compressed) {
          bytes = await decodeBody(sent, codings, o.maxBytes);
          // Bounds made from the body's size (a prompt's tokens: the hold, the context check) read this, not its Content-Length.
          noteDecodedBody(request, bytes.length);
          // What it decodes to is held in memory as a plain body of that size would be.
          if (shares) {
            refuseOver(takeShares(shares, bytes.length), request);
            heldDecoded = bytes.length;
          }
        }
        const body = parseBody(request, contentType, bytes, o);
        // The route's work on the body is the rest of its turn (limits/parse-turns.ts); a
        // compressed body that decoded small needs no more of it than a small body would.
        if (endTurn && bytes.length > LARGE_BODY_BYTES) holdTurn(request, endTurn);
        else endTurn?.();
        endTurn = undefined;
        return body;
      } finally {
        if (shares && held + heldDecoded > 0) giveShares(shares, held + heldDecoded);
        endTurn?.();
      }
    });
  // A request refused before its vendor request was built ends its turn in the errors plugin
  // (errors.ts); no after-response hook here: Elysia runs those in a setImmediate with an async
  // closure per request, which every answer would pay (see request-id.ts, closeTracesHook).
}

/** The body read, as JSON: decoded strictly, its shape bounded, parsed, and a large one checked against its schema. */
function parseBody(request: Request, contentType: string | undefined, bytes: Uint8Array, o: JsonBodyOptions): unknown {
  if (!contentType || !contentType.startsWith("application/json")) {
    // No body and no type: the route's schema says whether it wanted one. (With a type, returning
    // nothing would hand the request to Elysia's parser for it, which reads the body again.)
    if (bytes.length === 0 && !contentType) return;
    throw new GatewayError(400, "invalid_request", "The request body must be JSON, sent with Content-Type: application/json.");
  }
  const text = strictUtf8(bytes);
  if (text === undefined) throw new GatewayError(400, "invalid_request", "The request body is not valid UTF-8.");
  const shape = jsonShape(text, MAX_JSON_DEPTH, MAX_JSON_CONTAINERS, MAX_JSON_MEMBERS);
  if (shape.over === "depth") throw new GatewayError(400, "invalid_request", `The request body nests deeper than ${MAX_JSON_DEPTH} levels.`);
  if (shape.over) {
    const what = shape.over === "containers" ? `more than ${MAX_JSON_CONTAINERS} objects and arrays`
      : shape.over === "members" ? `more than ${MAX_JSON_MEMBERS} object members` : `an object of more than ${MAX_OBJECT_MEMBERS} members`;
    throw new GatewayError(413, "request_too_large", `The request body holds ${what}; no request needs that many.`);
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new GatewayError(400, "invalid_request", "The request body is not valid JSON.");
  }
  const schema = bytes.length > LARGE_BODY_BYTES ? o.schemaOf?.(new URL(request.url).pathname) : undefined;
  if (schema) {
    const failed = firstBodyError(schema, body);
    if (failed) {
      const param = validationParam(failed.path);
      throw new GatewayError(400, "invalid_request", validationMessage(failed), undefined, param ? { param } : undefined);
    }
  }
  return body;
}

/**
 * The body, read no further than the limit, within the body budget and before the deadline:
 * - with a Content-Length (already checked against the limit on arrival), that many bytes are
 *   taken from the budget before the first is read, and Bun's native read delivers them (it skips
 *   the stream machinery that costs ~20 µs per request);
 * - without one (chunked), the body is measured chunk by chunk, each taken from the budget as it
 *   comes, and refused as soon as it passes the limit;
 * - either way, a body that has not arrived `timeoutMs` after its reading started is given up.
 * Every refusal that leaves bytes unread closes the connection, so the rest is never received
 * (an unfinished read is ended by the close). A body read keeps what it took (`held`, the
 * caller's to give back once the body is parsed); a read that fails gives it back itself.
 */
async function readBody(request: Request, o: JsonBodyOptions, shares: readonly BodyShare[] | undefined): Promise<{ bytes: Uint8Array; held: number }> {
  if (!request.body) return { bytes: new Uint8Array(0), held: 0 };
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) <= o.maxBytes) {
    const size = Number(declared);
    if (shares) refuseOver(takeShares(shares, size), request);
    try {
      return { bytes: new Uint8Array(await withDeadline(request.arrayBuffer(), o.timeoutMs, o.timeoutMs)), held: shares ? size : 0 };
    } catch (err) {
      if (shares) giveShares(shares, size);
      throw err;
    }
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  /** Bytes taken from the shares (a chunk refused is not). */
  let taken = 0;
  const reader = request.body.getReader();
  const deadline = o.timeoutMs === undefined ? undefined : Date.now() + o.timeoutMs;
  try {
    for (;;) {
      const next = await withDeadline(reader.read(), deadline === undefined ? undefined : deadline - Date.now(), o.timeoutMs);
      if (next.done) break;
      const chunk = next.value;
      size += chunk.byteLength;
      if (size > o.maxBytes) {
        throw new GatewayError(413, "request_too_large", `The request body is over the limit of ${o.maxBytes} bytes.`, { connection: "close" });
      }
      if (shares) {
        refuseOver(takeShares(shares, chunk.byteLength), request, true);
        taken += chunk.byteLength;
      }
      chunks.push(chunk);
    }
  } catch (err) {
    if (shares) giveShares(shares, taken);
    throw err;
  }
  return { bytes: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks), held: taken };
}

/**
 * Turns a body budget's refusal into the client's answer: a key's, an account's or an address's
 * share full is that client's own doing (429), everyone's full is the gateway's (503); both say
 * to retry in a second, when bodies arriving now have arrived. Past its first bytes the rest is
 * never read: the connection closes.
 */
function refuseOver(refused: { refusal: "holder" | "total"; level: ShareLevel } | undefined, request: Request, reading = false): void {
  if (refused === undefined) return;
  const headers = { "retry-after": "1", ...(reading ? { connection: "close" } : unreadBodyHeaders(request)) };
  if (refused.refusal === "holder") {
    const whose = refused.level === "address" ? "from this address" : `for this ${refused.level}`;
    const setting = refused.level === "key" ? "limits.body_per_key_bytes" : refused.level === "account" ? "limits.body_per_account_bytes" : "requests without a key";
    throw new GatewayError(429, "rate_limit", `Too many request bodies on their way at once ${whose} (${setting}). Retry when they have arrived.`, headers, { code: "rate_limit_exceeded" });
  }
  throw new GatewayError(503, "overloaded", "The gateway is receiving too many request bodies at once. Retry in a second.", headers);
}

/**
 * Waits for `read` no longer than `ms` (none: as long as it takes); past it, the request is
 * answered 408 (saying the body's whole allowance, `timeoutMs`) and its connection closed.
 */
function withDeadline<T>(read: Promise<T>, ms: number | undefined, timeoutMs: number | undefined): Promise<T> {
  if (ms === undefined) return read;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new GatewayError(408, "timeout",
      `The request body did not arrive within ${(timeoutMs ?? ms) / 1000} s (limits.body_timeout_ms).`, { connection: "close" })), Math.max(0, ms));
  });
  // The read left behind ends when the connection closes; its rejection is nobody's to handle.
  read.catch(() => {});
  return Promise.race([read, late]).finally(() => clearTimeout(timer));
}
