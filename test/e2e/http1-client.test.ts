import { afterEach, describe, expect, test } from "bun:test";
import { deflateRawSync, deflateSync, gzipSync } from "node:zlib";
import { createHttp1Client, fastReader, wholeBody } from "../../src/transport/http1/client.ts";
import { attemptInit, responseHeader, type AbortListener, type AttemptHooks } from "../../src/transport/transport.ts";
import { Deadline } from "../../src/gateway/deadline.ts";
import { upstreamViaProxy } from "../../src/config/env.ts";
import { dribble, rawUpstream, type RawSocket } from "../helpers/raw-upstream.ts";

/**
 * The upstream client against raw loopback servers that write exactly the bytes each case
 * needs: splits anywhere, chunk extensions, trailers, bodies that end at close, stale keep-alive.
 */
type RawServer = { port: number; opened: number; requests: string[]; stop(): void };

function rawServer(answer: (request: string, socket: RawSocket, index: number) => void): RawServer {
  const upstream = rawUpstream((request, socket) => answer(request.raw, socket, request.index));
  return {
    port: upstream.port,
    get opened() {
      return upstream.opened;
    },
    get requests() {
      return upstream.requests.map((r) => r.raw);
    },
    stop: upstream.stop,
  };
}

const servers: RawServer[] = [];
const clients: ReturnType<typeof createHttp1Client>[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.stop();
  for (const c of clients.splice(0)) c.close();
});
function setup(answer: Parameters<typeof rawServer>[0], options: Parameters<typeof createHttp1Client>[0] = {}) {
  const server = rawServer(answer);
  servers.push(server);
  const client = createHttp1Client({ ...options });
  clients.push(client);
  const post = (body = "{}", init: RequestInit = {}) =>
    client.fetch(`http://127.0.0.1:${server.port}/v1/chat/completions?x=1`, { method: "POST", headers: { "content-type": "application/json" }, body, ...init });
  return { server, client, post };
}

/** A deadline's hooks as a transport sees them, whose AbortSignal must never be asked for. */
function abortHooks() {
  const fns: AbortListener[] = [];
  const hooks = {
    aborted: false,
    reason: undefined as unknown,
    get signal(): AbortSignal {
      throw new Error("the transport asked for the AbortSignal");
    },
    get listeners() {
      return fns.length;
    },
    answerProgress() {},
    addAbortListener: (fn: AbortListener) => {
      // As the deadline: one added after the abort never runs.
      if (!hooks.aborted) fns.push(fn);
    },
    removeAbortListener: (fn: AbortListener) => {
      const at = fns.indexOf(fn);
      if (at !== -1) fns.splice(at, 1);
    },
    abort(reason: unknown) {
      hooks.aborted = true;
      hooks.reason = reason;
      // A function, or an EventListener object (our client's exchange listens itself).
      for (const fn of fns.slice()) typeof fn === "function" ? fn() : fn.handleEvent();
    },
  };
  return hooks;
}

const JSON_HEAD = (length: number, extra = "") => `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n${extra}\r\n`;

describe("upstream HTTP/1.1 client", () => {
  test("sends one well-formed request and reuses the connection for the next", async () => {
    const { server, post } = setup((_req, socket) => socket.write(JSON_HEAD(11) + '{"ok":true}'));
    const first = await post('{"a":"é"}');
    expect(first.status).toBe(200);
    expect(first.headers.get("content-type")).toBe("application/json");
    expect(await first.json()).toEqual({ ok: true });
    expect(await (await post()).json()).toEqual({ ok: true });
    expect(server.opened).toBe(1);
    const request = server.requests[0]!;
    expect(request.startsWith("POST /v1/chat/completions?x=1 HTTP/1.1\r\n")).toBe(true);
    expect(request).toContain(`\r\nhost: 127.0.0.1:${server.port}\r\n`);
    expect(request).toContain("\r\naccept-encoding: identity\r\n");
    // Bytes, not characters: é is two.
    expect(request).toContain("\r\ncontent-length: 10\r\n");
    expect(request.endsWith('\r\n\r\n{"a":"\u00c3\u00a9"}')).toBe(true);
  });

  test("an answer's header fields arrive as sent: repeated ones, their case, after a clone, and a 204 without a body", async () => {
    const fields = "X-Vendor-Id: abc\r\nset-cookie: a=1\r\nSet-Cookie: b=2\r\nx-list: 1\r\nX-List:  2 \r\nretry-after: 3\r\n";
    const { post } = setup((_req, socket, index) => socket.write(index === 3 ? `HTTP/1.1 204 No Content\r\nx-empty: yes\r\n\r\n` : JSON_HEAD(2, fields) + "{}"));
    // One header by name, before and after the Headers are built, the same as a plain Response's.
    const single = await post();
    expect(responseHeader(single, "x-list")).toBe("1, 2");
    expect(responseHeader(single, "content-type")).toBe("application/json");
    expect(responseHeader(single, "x-absent")).toBeNull();
    expect(single.headers.get("x-list")).toBe("1, 2");
    expect(responseHeader(single, "x-list")).toBe("1, 2");
    expect(responseHeader(new Response("{}", { headers: { "X-List": "3" } }), "x-list")).toBe("3");
    await single.text();
    const read = await post();
    expect(read.statusText).toBe("OK");
    expect(read.headers.get("x-vendor-id")).toBe("abc");
    expect(read.headers.get("x-list")).toBe("1, 2");
    expect(read.headers.getSetCookie()).toEqual(["a=1", "b=2"]);
    expect(read.headers.get("retry-after")).toBe("3");
    expect(read.headers.get("content-length")).toBe("2");
    expect(await read.json()).toEqual({});
    // Cloned before anyone read them, the copy still has them (the fields are filled in on first use).
    const cloned = (await post()).clone();
    expect(cloned.headers.get("x-vendor-id")).toBe("abc");
    expect([...cloned.headers.keys()].sort()).toEqual(["content-length", "content-type", "retry-after", "set-cookie", "set-cookie", "x-list", "x-vendor-id"]);
    const empty = await post();
    expect(empty.status).toBe(204);
    expect(empty.headers.get("x-empty")).toBe("yes");
    expect(await empty.text()).toBe("");
  });

  test("a head cut across two writes with bytes 0x80–0x9F in a value reads as one in one write; blob() keeps the type", async () => {
    const first = "HTTP/1.1 429 Too Many Requests\r\ncontent-type: image/png\r\n";
    const second = "x-note: caf\u0080 \u00e2\u0080\u0094\r\nretry-after: 0\r\ncontent-length: 2\r\n\r\n{}";
    const { post } = setup((_req, socket) => void dribble(socket, [first, second].map((part) => Buffer.from(part, "latin1"))));
    const res = await post();
    expect(res.status).toBe(429);
    expect(responseHeader(res, "X-Note")).toBe("caf\u0080 \u00e2\u0080\u0094");
    expect(res.headers.get("x-note")).toBe("caf\u0080 \u00e2\u0080\u0094");
    expect(res.headers.get("retry-after")).toBe("0");
    const other = await post();
    // Bun reads a Blob's type from the Response's own Headers, not through the getter.
    expect((await other.blob()).type).toBe("image/png");
  });

  test("a chunked body split anywhere, with chunk extensions and trailers, arrives whole", async () => {
    const body = "data: {\"n\":1}\n\ndata: {\"n\":2}\n\n";
    const wire = `HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n` +
      `f;ext=1\r\n${body.slice(0, 15)}\r\n${(body.length - 15).toString(16)}\r\n${body.slice(15)}\r\n0\r\nx-trailer: yes\r\n\r\n`;
    const pieces = wire.match(/[\s\S]{1,7}/g)!;
    const { server, post } = setup((_req, socket) => void dribble(socket, pieces));
    const res = await post();
    expect(res.headers.get("transfer-encoding")).toBeNull();
    expect(await res.text()).toBe(body);
    // The connection went back to the pool: the next request uses it.
    const again = await post();
    expect(await again.text()).toBe(body);
    expect(server.opened).toBe(1);
  });

  test("a Content-Length body split across reads is handed over whole", async () => {
    const payload = JSON.stringify({ text: "x".repeat(5000) });
    const { post } = setup((_req, socket) => void dribble(socket, [JSON_HEAD(payload.length).slice(0, 20), JSON_HEAD(payload.length).slice(20) + payload.slice(0, 100), payload.slice(100)]));
    expect(await (await post()).text()).toBe(payload);
  });

  test("a whole answer's buffer is claimable once, without its stream; a streamed one has none", async () => {
    const payload = JSON.stringify({ text: "x".repeat(3000) });
    const { post } = setup((_req, socket) => void dribble(socket, [JSON_HEAD(payload.length) + payload.slice(0, 1000), payload.slice(1000)]));
    const res = await post();
    const bytes = wholeBody(res)!;
    expect(new TextDecoder().decode(bytes)).toBe(payload);
    expect(wholeBody(res)).toBeUndefined();
    expect(res.bodyUsed).toBe(false);
    const read = await post();
    expect(await read.text()).toBe(payload);
    expect(wholeBody(read)).toBeUndefined();
    const chunked = setup((_req, socket) => socket.write("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"));
    const streamed = await chunked.post();
    expect(wholeBody(streamed)).toBeUndefined();
    expect(await streamed.text()).toBe("{}");
  });

  test("an event stream sent with a Content-Length is still handed over as it arrives, not held whole", async () => {
    const frame = (i: number) => `data: {"i":${i}}\n\n`;
    const body = [0, 1, 2].map(frame).join("");
    let sendRest: (() => void) | undefined;
    const { post } = setup((_req, socket) => {
      socket.write(`HTTP/1.1 200 OK\r\ncontent-type: Text/Event-Stream; charset=utf-8\r\ncontent-length: ${body.length}\r\n\r\n${frame(0)}`);
      socket.flush();
      sendRest = () => socket.write(frame(1) + frame(2));
    });
    const res = await post();
    expect(wholeBody(res)).toBeUndefined();
    const reader = res.body!.getReader();
    // The first frame arrives while the rest has not been sent.
    const first = await reader.read();
    expect(new TextDecoder().decode(first.value)).toBe(frame(0));
    sendRest!();
    let rest = "";
    for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value);
    expect(rest).toBe(frame(1) + frame(2));
  });

  test("a body without length ends at close, and that connection is not reused", async () => {
    const { server, post } = setup((_req, socket) => {
      socket.write("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\nhello ");
      setTimeout(() => socket.end("world"), 5);
    });
    expect(await (await post()).text()).toBe("hello world");
    expect(await (await post()).text()).toBe("hello world");
    expect(server.opened).toBe(2);
  });

  test("a pooled connection the server closes as the next request arrives is replaced, and the request still goes through", async () => {
    const { server, post } = setup((_req, socket, index) => {
      // The race of a keep-alive timeout: the server drops the connection instead of answering.
      if (index === 1) socket.end();
      else socket.write(JSON_HEAD(2) + "{}");
    });
    expect((await post()).status).toBe(200);
    expect((await post()).status).toBe(200);
    expect(server.requests).toHaveLength(3);
    expect(server.opened).toBe(2);
  });

  test("a pooled connection closed while idle leaves the pool", async () => {
    const { server, client, post } = setup((_req, socket) => {
      socket.write(JSON_HEAD(2) + "{}");
      setTimeout(() => socket.end(), 1);
    });
    expect((await post()).status).toBe(200);
    await Bun.sleep(20);
    expect(client.openConnections()).toBe(0);
    expect((await post()).status).toBe(200);
    expect(server.requests).toHaveLength(2);
  });

  test("a large request refused before the upstream read it all: its connection is not kept, and the next call gets a new one (a raw-TCP probe)", async () => {
    // The upstream answers 413 once it sees the head, then stops reading; the kernel's buffers had
    // taken the whole request, so it looked sent. Reused, the next call waited for its first-byte limit.
    let opened = 0;
    const listener = Bun.listen<{ buf: string; answered: boolean }>({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        open(socket) {
          opened++;
          socket.data = { buf: "", answered: false };
        },
        data(socket, bytes) {
          if (socket.data.answered) return;
          socket.data.buf += bytes.toString("latin1");
          const end = socket.data.buf.indexOf("\r\n\r\n");
          if (end < 0) return;
          const length = Number(/content-length: (\d+)/i.exec(socket.data.buf.slice(0, end))?.[1] ?? 0);
          if (length > 100_000) {
            socket.data.answered = true;
            const body = '{"error":{"message":"too large","type":"invalid_request_error"}}';
            socket.write(`HTTP/1.1 413 Payload Too Large\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
            // Reads nothing more, and keeps the connection open.
            socket.pause();
          } else if (socket.data.buf.length >= end + 4 + length) {
            socket.data.buf = "";
            socket.write(JSON_HEAD(2) + "{}");
          }
        },
      },
    });
    const client = createHttp1Client({});
    clients.push(client);
    try {
      const url = `http://127.0.0.1:${listener.port}/v1/chat/completions`;
      const post = (body: string) => client.fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body, signal: AbortSignal.timeout(3000) });
      const refused = await post(JSON.stringify({ input: "x".repeat(3 * 1024 * 1024) }));
      expect(refused.status).toBe(413);
      await refused.text();
      const next = await post("{}");
      expect(next.status).toBe(200);
      expect(opened).toBe(2);
    } finally {
      listener.stop(true);
    }
  });

  test("an abort before the answer rejects with the signal's reason and closes the connection", async () => {
    const { client, post } = setup(() => {});
    const controller = new AbortController();
    const pending = post("{}", { signal: controller.signal });
    await Bun.sleep(5);
    controller.abort(new DOMException("first byte timeout", "TimeoutError"));
    const error = await pending.catch((e) => e);
    expect(error).toBeInstanceOf(DOMException);
    expect(error.name).toBe("TimeoutError");
    expect(client.openConnections()).toBe(0);
  });

  test("a cut (the gateway's stop) ends calls no byte of whose answer has come, leaves one whose answer is on its way, and refuses every later call", async () => {
    const { client, post } = setup((request, socket) => {
      // The second request gets its head and part of its body; the first gets nothing.
      if (request.includes('"answered"')) socket.write(`${JSON_HEAD(20)}{"partial":`);
    });
    const waiting = post("{}");
    const answered = post('{"answered":1}');
    await Bun.sleep(20);
    const reason = new Error("the gateway is shutting down");
    client.cut(reason);
    expect(await waiting.catch((e) => e)).toBe(reason);
    // Its head and bytes came: a whole answer on its way is not cut (the vendor made it).
    const pending = await Promise.race([answered.then(() => "settled", () => "failed"), Bun.sleep(50).then(() => "still waiting")]);
    expect(pending).toBe("still waiting");
    expect(await post("{}").catch((e) => e)).toBe(reason);
  });

  test("a call whose connection is still opening at the cut is never sent: it rejects with the cut's reason (a review)", async () => {
    const { server, client, post } = setup(() => {});
    const call = post("{}");
    const reason = new Error("the gateway is shutting down");
    client.cut(reason);
    expect(await call.catch((e) => e)).toBe(reason);
    await Bun.sleep(20);
    expect(server.requests.length).toBe(0);
  });

  test("an abort mid-stream ends the body with an error and closes the connection", async () => {
    const { client, post } = setup((_req, socket) => socket.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n"));
    const controller = new AbortController();
    const res = await post("{}", { signal: controller.signal });
    const reader = fastReader(res)!;
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("hello");
    const next = reader.read();
    controller.abort(new DOMException("client disconnected", "AbortError"));
    expect((await next.catch((e) => e)).name).toBe("AbortError");
    expect(client.openConnections()).toBe(0);
  });

  test("an attempt's deadline in the init (attemptInit): its abort ends the request and the stream, and the client never reads `signal`", async () => {
    const { server, client } = setup(() => {});
    const init = (hooks: AttemptHooks) => attemptInit(hooks, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    // The init as it is (the setup's helper spreads it, which reads every property).
    const send = (to: { server: RawServer; client: typeof client }, hooks: AttemptHooks) => to.client.fetch(`http://127.0.0.1:${to.server.port}/v1/chat/completions`, init(hooks));
    // Hooks whose signal may not be asked for: our transport must use the hooks alone.
    const hooks = abortHooks();
    const pending = send({ server, client }, hooks);
    await Bun.sleep(5);
    hooks.abort(new DOMException("first byte timeout", "TimeoutError"));
    const error = await pending.catch((e) => e);
    expect(error.name).toBe("TimeoutError");
    expect(hooks.listeners).toBe(0);
    expect(client.openConnections()).toBe(0);

    // Already aborted: refused before anything is written.
    const before = abortHooks();
    before.abort(new DOMException("gone", "AbortError"));
    expect((await send({ server, client }, before).catch((e) => e)).name).toBe("AbortError");
    expect(before.listeners).toBe(0);

    // Mid-stream: the body ends with the reason, the listener is gone, the connection closed.
    const streamed = setup((_req, socket) => socket.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n"));
    const streaming = abortHooks();
    const reader = fastReader(await send(streamed, streaming))!;
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("hello");
    const next = reader.read();
    streaming.abort(new DOMException("client disconnected", "AbortError"));
    expect((await next.catch((e) => e)).name).toBe("AbortError");
    expect(streaming.listeners).toBe(0);
    expect(streamed.client.openConnections()).toBe(0);
  });

  test("a wrapper that sets a signal of its own over an attempt's init is obeyed, as any signal is", async () => {
    const { server, client } = setup(() => {});
    const deadline = new Deadline({ firstByteMs: 60_000, idleMs: 60_000, totalMs: 60_000 });
    const own = new AbortController();
    const wrapped = { ...attemptInit(deadline, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" }), signal: own.signal };
    const pending = client.fetch(`http://127.0.0.1:${server.port}/v1/chat/completions`, wrapped);
    await Bun.sleep(5);
    own.abort(new DOMException("the wrapper's limit", "TimeoutError"));
    expect((await pending.catch((e) => e)).name).toBe("TimeoutError");
    expect(client.openConnections()).toBe(0);
    deadline.clear();
    // A copy that keeps the init's own signal (the getter's value) still ends with the deadline.
    const copied = { ...attemptInit(deadline, { method: "POST", headers: {}, body: "{}" }) };
    const second = client.fetch(`http://127.0.0.1:${server.port}/v1/chat/completions`, copied);
    await Bun.sleep(5);
    deadline.abort(new DOMException("first byte timeout", "TimeoutError"));
    expect((await second.catch((e) => e)).name).toBe("TimeoutError");
  });

  test("with coalescing on, requests made in one turn are all answered, each on its own pooled connection", async () => {
    const { server, client, post } = setup((req, socket) => {
      const body = req.slice(req.indexOf("\r\n\r\n") + 4);
      socket.write(JSON_HEAD(body.length) + body);
    }, { coalesce: () => true });
    // Pool two connections, then issue two requests in one turn over them.
    await Promise.all([post('{"warm":1}'), post('{"warm":2}')]);
    const pending = [post('{"n":1}'), post('{"n":2}')];
    const answers = await Promise.all(pending.map(async (p) => (await p).json()));
    expect(answers).toEqual([{ n: 1 }, { n: 2 }]);
    expect(server.opened).toBe(2);
    expect(client.openConnections()).toBe(2);
  });

  test("with coalescing on, a request aborted before its turn ends is never written", async () => {
    const { server, client, post } = setup((_req, socket) => socket.write(JSON_HEAD(2) + "{}"), { coalesce: () => true });
    await (await post()).text(); // a pooled connection, so the request is queued synchronously
    const controller = new AbortController();
    const pending = post('{"never":"sent"}', { signal: controller.signal });
    controller.abort(new DOMException("client disconnected", "AbortError"));
    expect((await pending.catch((e) => e)).name).toBe("AbortError");
    await Bun.sleep(20);
    expect(server.requests.map((r) => r.includes("never"))).toEqual([false]);
    expect(client.openConnections()).toBe(0);
  });

  test("a cancelled stream closes its unfinished connection", async () => {
    const { client, post } = setup((_req, socket) => socket.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n"));
    const res = await post();
    const reader = fastReader(res)!;
    await reader.read();
    await reader.cancel();
    expect(client.openConnections()).toBe(0);
  });

  test("a 6 MB request body is sent whole through partial writes", async () => {
    const big = JSON.stringify({ content: "é".repeat(3 * 1024 * 1024) });
    const { server, post } = setup((_req, socket) => socket.write(JSON_HEAD(2) + "{}"));
    expect((await post(big)).status).toBe(200);
    expect(Buffer.byteLength(server.requests[0]!, "latin1")).toBeGreaterThan(Buffer.byteLength(big));
    expect(server.requests[0]!.endsWith(Buffer.from(big).toString("latin1"))).toBe(true);
  });

  test("a compressed answer is decoded, and no longer claims an encoding or a length", async () => {
    const gz = gzipSync(Buffer.from('{"ok":"gzip"}'));
    const { post } = setup((_req, socket) => {
      socket.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\ncontent-length: ${gz.length}\r\n\r\n`);
      socket.write(gz);
    });
    const res = await post();
    expect(res.headers.get("content-encoding")).toBeNull();
    expect(res.headers.get("content-length")).toBeNull();
    expect(await res.json()).toEqual({ ok: "gzip" });
  });

  test("`deflate` is read as a zlib stream or, as browsers and curl read it, raw deflate, even split after its first byte (a raw-TCP probe)", async () => {
    const body = JSON.stringify({ ok: "deflate", pad: "x".repeat(5000) });
    for (const coded of [deflateSync(Buffer.from(body)), deflateRawSync(Buffer.from(body))]) {
      const { post } = setup((_req, socket) => {
        socket.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: deflate\r\ntransfer-encoding: chunked\r\n\r\n`);
        socket.write(`1\r\n`);
        socket.write(coded.subarray(0, 1));
        setTimeout(() => socket.write(Buffer.concat([Buffer.from(`\r\n${(coded.length - 1).toString(16)}\r\n`), coded.subarray(1), Buffer.from("\r\n0\r\n\r\n")])), 20);
      });
      const res = await post();
      expect(res.headers.get("content-encoding")).toBeNull();
      expect(await res.text()).toBe(body);
    }
  });

  test("an encoding it cannot decode is an error for the caller, not a crash", async () => {
    const { client, post } = setup((_req, socket) => socket.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: compress\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n"));
    await expect(post()).rejects.toThrow(/unsupported content-encoding compress/);
    expect(client.openConnections()).toBe(0);
  });

  test("a malformed answer is an error, not a crash, and the client still works after", async () => {
    let bad = true;
    const { post } = setup((_req, socket) => {
      if (bad) socket.write("HTTP/1.1 200 OK\r\ncontent-length: twelve\r\n\r\n");
      else socket.write(JSON_HEAD(2) + "{}");
      bad = false;
    });
    expect(await post().catch((e) => e)).toBeInstanceOf(Error);
    expect((await post()).status).toBe(200);
  });

  test("1xx answers are skipped; 204 has no body", async () => {
    const { post } = setup((_req, socket, index) => {
      if (index === 0) socket.write("HTTP/1.1 100 Continue\r\n\r\n" + JSON_HEAD(2) + "{}");
      else socket.write("HTTP/1.1 204 No Content\r\n\r\n");
    });
    expect(await (await post()).text()).toBe("{}");
    const empty = await post();
    expect(empty.status).toBe(204);
    expect(empty.body).toBeNull();
  });

  test("CR or LF in a header value is refused before anything is sent", async () => {
    const { server, client } = setup(() => {});
    const url = `http://127.0.0.1:${server.port}/v1/x`;
    await expect(client.fetch(url, { method: "POST", headers: { "x-a": "1\r\nx-b: 2" }, body: "{}" })).rejects.toThrow(TypeError);
    await Bun.sleep(5);
    expect(server.requests).toHaveLength(0);
  });

  test("a refused connection is an error the caller can retry", async () => {
    const client = createHttp1Client({});
    clients.push(client);
    const port = rawServer(() => {});
    port.stop();
    await expect(client.fetch(`http://127.0.0.1:${port.port}/`, { method: "POST", headers: {}, body: "{}" })).rejects.toThrow(/could not connect/);
  });

  test("requests it does not carry go to the fallback: other methods, and any proxy in the environment", async () => {
    const seen: string[] = [];
    const fallback = async (url: string) => {
      seen.push(url);
      return new Response("fallback");
    };
    const direct = createHttp1Client({ fallback });
    const proxied = createHttp1Client({ viaProxy: upstreamViaProxy({ HTTPS_PROXY: "http://proxy:3128" }), fallback });
    clients.push(direct, proxied);
    expect(await (await direct.fetch("http://127.0.0.1:1/image.png", { method: "GET" })).text()).toBe("fallback");
    expect(await (await proxied.fetch("http://127.0.0.1:1/v1/x", { method: "POST", headers: {}, body: "{}" })).text()).toBe("fallback");
    expect(seen).toEqual(["http://127.0.0.1:1/image.png", "http://127.0.0.1:1/v1/x"]);
  });

  test("a streamed body is readable through the fast reader or the standard stream, not both", async () => {
    const answer = (_req: string, socket: RawSocket) =>
      socket.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
    const { post } = setup(answer);
    const viaStream = await post();
    expect(await viaStream.text()).toBe("abc");
    expect(fastReader(viaStream)).toBeUndefined();
    const viaReader = await post();
    const reader = fastReader(viaReader)!;
    expect(fastReader(viaReader)).toBeUndefined();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe("abc");
    expect((await reader.read()).done).toBe(true);
  });
});

describe("upstream HTTP/1.1 client over TLS", () => {
  // A private CA and two server certificates (test/fixtures/tls): one for localhost and
  // 127.0.0.1, one for other.test only.
  const dir = `${import.meta.dir}/../fixtures/tls`;
  const serve = (name: "server" | "other") =>
    Bun.serve({ port: 0, hostname: "127.0.0.1", tls: { cert: Bun.file(`${dir}/${name}.pem`), key: Bun.file(`${dir}/${name}.key`) }, fetch: async (r) => Response.json({ got: await r.text() }) });
  const post = (client: ReturnType<typeof createHttp1Client>, port: number) =>
    client.fetch(`https://localhost:${port}/v1/messages`, { method: "POST", headers: { "content-type": "application/json" }, body: '"hi"' });

  test("a certificate from a trusted CA for the host name: the answer arrives, over one reused connection", async () => {
    const server = serve("server");
    const client = createHttp1Client({ ca: await Bun.file(`${dir}/ca.pem`).text() });
    clients.push(client);
    try {
      expect(await (await post(client, server.port!)).json()).toEqual({ got: '"hi"' });
      expect(await (await post(client, server.port!)).json()).toEqual({ got: '"hi"' });
      expect(client.openConnections()).toBe(1);
    } finally {
      server.stop(true);
    }
  });

  test("an untrusted certificate is refused", async () => {
    const server = serve("server");
    const client = createHttp1Client({});
    clients.push(client);
    try {
      await expect(post(client, server.port!)).rejects.toThrow(/TLS handshake with the upstream failed/);
    } finally {
      await Bun.sleep(20);
      server.stop(true);
    }
  });

  test("a trusted certificate for another host name is refused", async () => {
    const server = serve("other");
    const client = createHttp1Client({ ca: await Bun.file(`${dir}/ca.pem`).text() });
    clients.push(client);
    try {
      await expect(post(client, server.port!)).rejects.toThrow(/altnames/);
    } finally {
      await Bun.sleep(20);
      server.stop(true);
    }
  });
});
