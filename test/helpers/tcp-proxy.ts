import type { Socket, TCPSocketListener } from "bun";

interface Side {
  peer?: Socket<Side>;
  /** Bytes the peer's socket did not take yet (a write may be partial). */
  backlog: Uint8Array[];
  /** Bytes that arrived before the connection to the target was open. */
  early: Uint8Array[];
}

function send(socket: Socket<Side>, chunk: Uint8Array): void {
  const queue = socket.data.backlog;
  if (queue.length > 0) {
    queue.push(chunk);
    return;
  }
  const written = socket.write(chunk);
  if (written < chunk.length) queue.push(chunk.subarray(Math.max(0, written)));
}

function drain(socket: Socket<Side>): void {
  const queue = socket.data.backlog;
  while (queue.length > 0) {
    const chunk = queue[0]!;
    const written = socket.write(chunk);
    if (written < chunk.length) {
      queue[0] = chunk.subarray(Math.max(0, written));
      return;
    }
    queue.shift();
  }
}

/**
 * A TCP relay on loopback in front of a real service (PostgreSQL), so a test can make the
 * service unreachable — `cut()` closes every connection and stops listening, as a dead host or a
 * restart does — and bring it back on the same port with `restore()`, without touching the
 * server other tests share.
 */
export function tcpProxy(targetPort: number, targetHost = "127.0.0.1") {
  const open = new Set<Socket<Side>>();
  let listener: TCPSocketListener<Side> | undefined;
  let port = 0;

  const listen = () => {
    const server: TCPSocketListener<Side> = Bun.listen<Side>({
      hostname: "127.0.0.1",
      port,
      socket: {
        open(client) {
          client.data = { backlog: [], early: [] };
          open.add(client);
          void Bun.connect<Side>({
            hostname: targetHost,
            port: targetPort,
            socket: {
              open(upstream) {
                upstream.data = { peer: client, backlog: [], early: [] };
                client.data.peer = upstream;
                open.add(upstream);
                for (const chunk of client.data.early) send(upstream, chunk);
                client.data.early = [];
              },
              data(upstream, chunk) {
                send(upstream.data.peer!, new Uint8Array(chunk));
              },
              drain,
              close(upstream) {
                open.delete(upstream);
                upstream.data.peer?.end();
              },
              error(upstream) {
                upstream.data.peer?.end();
              },
            },
          }).catch(() => client.end());
        },
        data(client, chunk) {
          const copy = new Uint8Array(chunk);
          if (client.data.peer) send(client.data.peer, copy);
          else client.data.early.push(copy);
        },
        drain,
        close(client) {
          open.delete(client);
          client.data.peer?.end();
        },
        error(client) {
          client.data.peer?.end();
        },
      },
    });
    listener = server;
    port = server.port;
  };
  listen();

  return {
    get port() {
      return port;
    },
    /** The service becomes unreachable: connections drop, new ones are refused. */
    cut(): void {
      listener?.stop(true);
      listener = undefined;
      for (const socket of open) socket.terminate();
      open.clear();
    },
    /** The service is back, on the same port. */
    restore(): void {
      if (!listener) listen();
    },
    stop(): void {
      this.cut();
    },
  };
}
