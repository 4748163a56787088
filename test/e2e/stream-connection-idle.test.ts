/**
 * A stream lifts its request's idle timeout (respond.ts: a quiet upstream is the deadline's to
 * judge), and Bun keeps a connection's timeout for the connection's life: left at 0, a keep-alive
 * connection that once carried a stream was never closed for idleness, and one whose stream ended
 * while its client read nothing (its tail in the socket buffers) stayed open for good, past
 * client_idle_ms and the server's idle timeout, outside every bound (a review, twenty-sixth
 * session). The timeout is now put back (client_idle_ms) before the stream's last write.
 */
import { expect, setDefaultTimeout, test } from "bun:test";
import net from "node:net";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { startGateway } from "../helpers/gateway.ts";

setDefaultTimeout(60_000);
const upstream = useFakeUpstream();
const chunk = (content: string, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: "chatcmpl-s", object: "chat.completion.chunk", created: 1, model: "gpt-4o-mini", choices: [{ index: 0, delta: finish ? {} : { content }, finish_reason: finish }] })}\n\n`;

async function probe(o: { read: boolean; pieces?: number }): Promise<{ closed: boolean; status: string[] }> {
  const gw = await startGateway({ upstreamUrl: upstream.url, clientIdleMs: 1_000, idleTimeoutSeconds: 2 });
  if (o.pieces) {
    const frame = chunk("a").repeat(100);
    upstream.rule((rec) => (rec.path === "/v1/chat/completions" && rec.body?.stream ? { kind: "sse", chunks: Array.from({ length: o.pieces! }, () => frame).concat(chunk("", "stop"), "data: [DONE]\n\n") } : undefined));
  }
  const socket = net.connect(Number(new URL(gw.url).port), "127.0.0.1");
  let closed = false;
  socket.on("close", () => (closed = true));
  socket.on("error", () => {});
  socket.on("data", () => {
    if (!o.read) socket.pause();
  });
  try {
    const body = JSON.stringify({ model: "test/free", stream: true, messages: [{ role: "user", content: "hi" }] });
    socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${gw.key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    // client_idle_ms 1 s, idleTimeout 2 s: 8 s is well past both.
    await Bun.sleep(8_000);
    // A client that reads nothing sees no close while the answer's tail waits unread in its
    // socket: it reads now, and a gateway that closed its side ends the stream at once (its FIN
    // comes after the tail); one that kept it open sends nothing more.
    if (!o.read && !closed) {
      socket.removeAllListeners("data");
      socket.on("data", () => {});
      socket.on("end", () => (closed = true));
      socket.resume();
      await Bun.sleep(2_000);
    }
    await gw.app.services.settled();
    return { closed, status: gw.db.query<{ status: string }, []>("SELECT status FROM usage_records").all().map((r) => r.status) };
  } finally {
    upstream.rule(undefined);
    socket.destroy();
    await gw.stop();
  }
}

test("a keep-alive connection whose stream was read to its end is closed once idle (idleTimeout 2 s)", async () => {
  const r = await probe({ read: true });
  expect(r.status).toEqual(["ok"]);
  expect(r.closed).toBe(true);
});

test("a ~2 MB stream that ended while its client read nothing: the connection is given up, not kept for good", async () => {
  const r = await probe({ read: false, pieces: 150 });
  // Settled as delivered ("ok"), its share given back; the connection closed by the gateway within client_idle_ms.
  expect(r.status).toEqual(["ok"]);
  expect(r.closed).toBe(true);
});
