import type { Socket } from "bun";
import type { Target } from "./request-writer.ts";

/**
 * Keep-alive connections per origin, and their hygiene.
 *
 * A connection belongs to one exchange at a time (its `owner`), which gets every byte the socket
 * reads. A connection without an owner that receives anything is destroyed: in HTTP/1.1 an
 * answer nobody asked for can only be read as the next request's answer, so the connection is
 * worth nothing after it.
 *
 * A connection freed during this turn of the event loop is `cooling` until the turn ends: bytes
 * the upstream sent after the answer may already wait in the kernel, unread until the next poll.
 * `take` prefers connections a poll has looked at since they were freed, and the client holds
 * the write of a request on a pooled connection until those polls' callbacks have run (see
 * client.ts), so late bytes reach the idle check before a request can claim them.
 *
 * An origin that sent an answer nobody asked for (bytes on an idle connection, or after the end
 * of an answer) is on probation for `probationMs`, and while it is, its connections carry one
 * request each: a freed connection is closed, so a copy of an answer, however late, lands on a
 * closed socket and never on another request. HTTP/1.1 cannot tell a copy that comes after the
 * next request was written from that request's answer, and a rest before reuse (`reuseAfterMs`,
 * kept as `reuseOnProbation: "rest"`) only moves the line: under load, an event loop a few
 * milliseconds late let copies through it (22 of 2,000 in one run of the late-copy test). The
 * price is a new connection per request to that origin alone, for the probation; origins that
 * never sent such a copy pay one lookup in an empty map.
 */
export interface ConnectionOwner {
  /** Each piece of the socket's bytes while this owner has the connection. */
  data(bytes: Uint8Array): void;
  /** The connection is gone (closed by the peer, failed, or destroyed by us). */
  closed(reason: Error): void;
  drained(): void;
  /** The client is stopping: an exchange no byte of whose answer has come yet ends with `reason`. */
  cut(reason: Error): void;
}

export interface Connection {
  socket: Socket<Connection>;
  origin: string;
  owner: ConnectionOwner | null;
  dead: boolean;
  /** Freed during the current turn: no poll has read what may have arrived since. */
  cooling: boolean;
  /** When it was last freed (`performance.now()`). */
  freedAt: number;
}

export interface PoolOptions {
  /** Extra TLS trust (tests use a private CA); the system store is always used. */
  ca?: string;
  /** Seconds an idle connection is kept; under common server keep-alive timeouts. */
  idleSeconds: number;
  maxIdlePerOrigin: number;
  /** How long a freed connection of an origin on probation rests before it carries another request (see above); 0 for no rest. */
  reuseAfterMs: number;
  /** How long an origin stays on probation after it last sent an answer nobody asked for. */
  probationMs: number;
  /** While on probation: `close` (default) carries one request per connection; `rest` reuses after `reuseAfterMs`. */
  reuseOnProbation?: "close" | "rest";
}

export interface Pool {
  /** A new connection, owned by nobody yet. Rejects with the socket's error. */
  connect(target: Target): Promise<Connection>;
  /** An idle connection to the origin, if there is one; it is the caller's to own. */
  take(origin: string): Connection | undefined;
  /** Back to the pool after a whole answer whose framing left nothing in doubt. */
  release(conn: Connection): void;
  /** Closed at once; its owner, if any, hears `closed(reason)`. */
  destroy(conn: Connection, reason: Error): void;
  /** The origin sent an answer nobody asked for: on probation (see above). */
  distrust(origin: string): void;
  /** Open sockets, idle or owned. */
  size(): number;
  /** Every exchange still waiting for its answer's first byte ends with `reason` (ConnectionOwner.cut). */
  cut(reason: Error): void;
  close(): void;
}

/** Why a connection of an origin on probation is closed rather than reused. */
const ON_PROBATION = new Error("origin on probation: one request per connection");

export function createPool(options: PoolOptions): Pool {
  const idle = new Map<string, Connection[]>();
  const open = new Set<Connection>();
  /** Origins on probation, and until when. */
  const probation = new Map<string, number>();
  /** Connections freed this turn; they stop cooling when it ends. */
  const cooling: Connection[] = [];
  let turnEndScheduled = false;

  const handlers = {
    data(socket: Socket<Connection>, bytes: Uint8Array) {
      const conn = socket.data;
      if (conn.owner) conn.owner.data(bytes);
      else if (isRequestTimeout(bytes)) {
        // A server's goodbye to an idle connection (MDN: "sent on an idle connection by some
        // servers"), not a late copy of an answer: no probation, whose one request per connection
        // such a server would never leave. A 408 that reaches a request is replayed (exchange.ts).
        destroy(conn, new Error("the upstream timed out the idle connection (408)"));
      } else {
        distrust(conn.origin);
        destroy(conn, new Error("the upstream sent bytes on an idle connection"));
      }
    },
    drain(socket: Socket<Connection>) {
      socket.data.owner?.drained();
    },
    close(socket: Socket<Connection>) {
      lost(socket.data, new Error("the upstream closed the connection"));
    },
    error(socket: Socket<Connection>, error: Error) {
      lost(socket.data, error);
    },
    handshake(socket: Socket<Connection>, success: boolean, authorizationError: Error | null) {
      // Verification failures close the socket anyway; this keeps the reason for the log.
      if (!success || authorizationError) {
        lost(socket.data, new Error(`TLS handshake with the upstream failed: ${authorizationError?.message ?? "refused"}`));
        socket.terminate();
      }
    },
    timeout(socket: Socket<Connection>) {
      // Only idle connections have a timeout set.
      destroy(socket.data, new Error("idle timeout"));
    },
  };

  function lost(conn: Connection, reason: Error): void {
    if (conn.dead) return;
    conn.dead = true;
    open.delete(conn);
    unpool(conn);
    const owner = conn.owner;
    conn.owner = null;
    owner?.closed(reason);
  }

  function destroy(conn: Connection, reason: Error): void {
    lost(conn, reason);
    conn.socket.terminate();
  }

  function distrust(origin: string): void {
    probation.set(origin, performance.now() + options.probationMs);
  }

  /** Whether the origin is on probation now (a probation that ran out is forgotten). */
  function onProbation(origin: string, now: number): boolean {
    const until = probation.get(origin);
    if (until === undefined) return false;
    if (until > now) return true;
    probation.delete(origin);
    return false;
  }

  /** How long a freed connection of the origin rests now (`rest` mode). */
  function restOf(origin: string, now: number): number {
    return onProbation(origin, now) ? options.reuseAfterMs : 0;
  }

  const closesOnProbation = options.reuseOnProbation !== "rest";

  function unpool(conn: Connection): void {
    const list = idle.get(conn.origin);
    const at = list ? list.indexOf(conn) : -1;
    if (at >= 0) list!.splice(at, 1);
  }

  function endTurn(): void {
    turnEndScheduled = false;
    for (const conn of cooling) conn.cooling = false;
    cooling.length = 0;
  }

  return {
    async connect(target) {
      // The socket's handlers need the connection as their data, so it exists before its socket does.
      const conn = { socket: null, origin: target.origin, owner: null, dead: false, cooling: false, freedAt: 0 } as unknown as Connection;
      const { tls, hostname, port } = target;
      conn.socket = await Bun.connect<Connection>({
        hostname,
        port,
        data: conn,
        socket: handlers,
        ...(tls ? { tls: { serverName: hostname, rejectUnauthorized: true, ...(options.ca ? { ca: options.ca } : {}) } } : {}),
      });
      conn.socket.setNoDelay(true);
      open.add(conn);
      return conn;
    },

    take(origin) {
      const list = idle.get(origin);
      if (!list || list.length === 0) return undefined;
      // The usual case, an origin never on probation, costs one lookup in an empty map.
      let at: number;
      if (probation.size === 0) at = newestPolled(list);
      else {
        const now = performance.now();
        if (closesOnProbation && onProbation(origin, now)) {
          // Freed before the origin was caught: they may still get a late copy, so none is reused.
          for (const conn of list.splice(0)) destroy(conn, ON_PROBATION);
          return undefined;
        }
        const rest = restOf(origin, now);
        at = rest > 0 ? newestRested(list, now - rest) : newestPolled(list);
      }
      if (at < 0) return undefined;
      const conn = list[at]!;
      list.splice(at, 1);
      conn.socket.timeout(0);
      return conn;
    },

    release(conn) {
      conn.owner = null;
      if (conn.dead) return;
      // An origin on probation: no second request on this connection (see above).
      if (closesOnProbation && probation.size > 0 && onProbation(conn.origin, performance.now())) {
        return destroy(conn, ON_PROBATION);
      }
      let list = idle.get(conn.origin);
      if (!list) idle.set(conn.origin, (list = []));
      if (list.length >= options.maxIdlePerOrigin) return destroy(conn, new Error("pool full"));
      conn.socket.timeout(options.idleSeconds);
      conn.freedAt = performance.now();
      list.push(conn);
      conn.cooling = true;
      cooling.push(conn);
      if (!turnEndScheduled) {
        turnEndScheduled = true;
        // Immediates run once the turn's I/O callbacks have all run, before the next poll.
        setImmediate(endTurn);
      }
    },

    destroy,
    distrust,
    size: () => open.size,
    cut(reason) {
      for (const conn of [...open]) conn.owner?.cut(reason);
    },
    close() {
      for (const conn of [...open]) destroy(conn, new Error("client closed"));
    },
  };
}

/**
 * The most recently freed connection that was freed at or before `restedBefore` and has been
 * polled since; -1 for none. The list is in the order its connections were freed.
 */
function newestRested(list: Connection[], restedBefore: number): number {
  let low = 0;
  let high = list.length;
  while (low < high) {
    const mid = (low + high) >>> 1;
    if (list[mid]!.freedAt <= restedBefore) low = mid + 1;
    else high = mid;
  }
  let at = low - 1;
  while (at >= 0 && list[at]!.cooling) at--;
  return at;
}

/** Without a rest: the most recently freed connection a poll has looked at, else the most recent. */
function newestPolled(list: Connection[]): number {
  // Cooling connections are the most recently freed, so they sit on top of the stack.
  let at = list.length - 1;
  while (at > 0 && list[at]!.cooling) at--;
  return list[at]!.cooling ? list.length - 1 : at;
}

const REQUEST_TIMEOUT = /^HTTP\/1\.[01] 408[ \r]/;

/** Bytes that start a 408 answer (a status line's first 13 bytes, read in one piece). */
function isRequestTimeout(bytes: Uint8Array): boolean {
  if (bytes.length < 13) return false;
  return REQUEST_TIMEOUT.test(String.fromCharCode(...bytes.subarray(0, 13)));
}
