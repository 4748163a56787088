import type { Socket } from "bun";

/**
 * A loopback TCP server that writes exactly the bytes each test scripts, for the upstream
 * client's tests: it reads requests (head, then as many body bytes as announced) one at a time
 * per connection and hands each to `answer`, which writes whatever it likes, well-formed or not.
 */
export interface RawRequest {
  /** The whole request, head and body, as latin1 text. */
  raw: string;
  body: string;
  /** Index among all requests this server received. */
  index: number;
}

export interface RawConnection {
  buf: string;
  /** Requests this connection carried so far. */
  served: number;
  /** Set by `pump` while it waits for the socket to drain. */
  onDrain?: () => void;
  onClose?: () => void;
  closed: boolean;
}

export type RawSocket = Socket<RawConnection>;

export interface RawUpstream {
  port: number;
  url: string;
  /** Connections accepted so far. */
  opened: number;
  requests: RawRequest[];
  sockets: RawSocket[];
  stop(): void;
}

export function rawUpstream(answer: (request: RawRequest, socket: RawSocket) => void): RawUpstream {
  const state: RawUpstream = { port: 0, url: "", opened: 0, requests: [], sockets: [], stop: () => {} };
  const server = Bun.listen<RawConnection>({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(socket) {
        socket.data = { buf: "", served: 0, closed: false };
        state.opened++;
        state.sockets.push(socket);
      },
      data(socket, bytes) {
        socket.data.buf += bytes.toString("latin1");
        for (;;) {
          const end = socket.data.buf.indexOf("\r\n\r\n");
          if (end < 0) return;
          const length = Number(/content-length: (\d+)/i.exec(socket.data.buf.slice(0, end))?.[1] ?? 0);
          if (socket.data.buf.length < end + 4 + length) return;
          const raw = socket.data.buf.slice(0, end + 4 + length);
          socket.data.buf = socket.data.buf.slice(end + 4 + length);
          const request = { raw, body: raw.slice(end + 4), index: state.requests.length };
          state.requests.push(request);
          socket.data.served++;
          answer(request, socket);
        }
      },
      drain(socket) {
        socket.data.onDrain?.();
      },
      close(socket) {
        socket.data.closed = true;
        socket.data.onClose?.();
      },
    },
  });
  state.port = server.port;
  state.url = `http://127.0.0.1:${server.port}`;
  state.stop = () => server.stop(true);
  return state;
}

/** Writes the pieces one by one, each in its own tick, so the client sees them as separate reads. */
export async function dribble(socket: Socket<unknown>, pieces: (string | Uint8Array)[]) {
  for (const piece of pieces) {
    socket.write(piece);
    socket.flush();
    await Bun.sleep(1);
  }
}

/**
 * Writes `next()` pieces for as long as the peer reads them, waiting for drains, until `next`
 * returns null or the peer closes. Resolves with the bytes the socket accepted.
 */
export function pump(socket: RawSocket, next: () => Uint8Array | null): Promise<number> {
  return new Promise((resolve) => {
    let sent = 0;
    let rest: Uint8Array | null = null;
    const go = () => {
      for (;;) {
        if (socket.data.closed) return resolve(sent);
        const piece = rest ?? next();
        rest = null;
        if (!piece) return resolve(sent);
        const n = socket.write(piece);
        sent += Math.max(0, n);
        if (n < piece.length) {
          rest = piece.subarray(Math.max(0, n));
          return;
        }
      }
    };
    socket.data.onDrain = go;
    socket.data.onClose = () => resolve(sent);
    go();
  });
}
