import net from "node:net";

export interface RawUploadResult {
  status: number;
  headers: Record<string, string>;
  /** The response body (its Content-Length), parsed by the caller. */
  body: string;
  /** Bytes the server sent after that one response: another response, junk. */
  trailing: number;
  /** Body bytes this client had written when the response's first byte arrived. */
  sentWhenAnswered: number;
  /** Body bytes written in all. */
  sent: number;
  /** The server ended the connection (rather than this client giving up after `waitMs`). */
  closedByServer: boolean;
}

/**
 * Sends a request whose body keeps coming (`total` bytes of `fill`, chunked or with a
 * Content-Length) on a raw socket and records how much of it the server took before it answered
 * and whether it then closed: what a client sees of a gateway that does (or does not) read a
 * body it has refused. Pieces go out with back-pressure, so `sent` is what the socket accepted.
 */
export function rawUpload(o: {
  port: number;
  method?: string;
  path: string;
  headers?: Record<string, string>;
  total: number;
  chunked: boolean;
  fill?: number;
  waitMs?: number;
}): Promise<RawUploadResult> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(o.port, "127.0.0.1");
    const piece = Buffer.alloc(64 * 1024, o.fill ?? 0x61);
    let sent = 0;
    let sentWhenAnswered = -1;
    let received = Buffer.alloc(0);
    let closedByServer = false;
    const giveUp = setTimeout(() => socket.destroy(), o.waitMs ?? 10_000);
    socket.on("connect", () => {
      const head = Object.entries({ host: "127.0.0.1", ...o.headers }).map(([k, v]) => `${k}: ${v}\r\n`).join("");
      const framing = o.chunked ? "transfer-encoding: chunked\r\n" : `content-length: ${o.total}\r\n`;
      socket.write(`${o.method ?? "POST"} ${o.path} HTTP/1.1\r\n${head}${framing}\r\n`);
      const pump = () => {
        while (sent < o.total && !socket.destroyed) {
          const size = Math.min(piece.length, o.total - sent);
          const bytes = size === piece.length ? piece : piece.subarray(0, size);
          const ok = o.chunked ? socket.write(`${size.toString(16)}\r\n`) && socket.write(bytes) && socket.write("\r\n") : socket.write(bytes);
          sent += size;
          if (!ok) return void socket.once("drain", pump);
        }
        if (o.chunked && !socket.destroyed) socket.write("0\r\n\r\n");
      };
      pump();
    });
    socket.on("data", (data: Buffer) => {
      if (sentWhenAnswered < 0) sentWhenAnswered = sent;
      received = Buffer.concat([received, data]);
    });
    socket.on("end", () => (closedByServer = true));
    // Writing into a connection the server closed: EPIPE or ECONNRESET, which is the server closing too.
    socket.on("error", () => (closedByServer = true));
    socket.on("close", () => {
      clearTimeout(giveUp);
      const split = received.indexOf("\r\n\r\n");
      if (split < 0) return reject(new Error(`no response (sent ${sent} bytes)`));
      const [statusLine, ...lines] = received.subarray(0, split).toString("latin1").split("\r\n");
      const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]));
      const length = Number(headers["content-length"] ?? 0);
      const body = received.subarray(split + 4, split + 4 + length).toString("utf8");
      resolve({ status: Number(statusLine!.split(" ")[1]), headers, body, trailing: received.length - (split + 4 + length), sentWhenAnswered, sent, closedByServer });
    });
  });
}
