import { afterEach, describe, expect, test } from "bun:test";
import { constants, deflateRawSync } from "node:zlib";
import { createHttp1Client, UpstreamConnectionError, type Http1Client } from "../../src/transport/http1/client.ts";
import { createFetchTransport } from "../../src/transport/fetch-transport.ts";
import { ResponseTooLargeError } from "../../src/transport/transport.ts";
import { pump, rawUpstream, type RawRequest, type RawSocket, type RawUpstream } from "../helpers/raw-upstream.ts";
import { IMAGE_CHAT_MODEL, OPENAI_MODEL, post as postToGateway, startGateway } from "../helpers/gateway.ts";
import { until } from "../helpers/until.ts";

/**
 * The upstream client against upstreams that are broken or hostile, each a raw TCP server
 * writing scripted bytes: bodies without end, compression bombs, answers cut off, malformed
 * framing, and answers nobody asked for on pooled connections.
 */
const MiB = 1024 * 1024;
const upstreams: RawUpstream[] = [];
const clients: Http1Client[] = [];
afterEach(() => {
  for (const u of upstreams.splice(0)) u.stop();
  for (const c of clients.splice(0)) c.close();
});

function setup(answer: (request: RawRequest, socket: RawSocket) => void, maxResponseBytes = MiB, rest: { reuseAfterMs?: number; reuseOnProbation?: "close" | "rest" } = {}) {
  const upstream = rawUpstream(answer);
  upstreams.push(upstream);
  const client = createHttp1Client({ maxResponseBytes, ...rest });
  clients.push(client);
  const post = (body = "{}") => client.fetch(`${upstream.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
  return { upstream, client, post };
}

const json = (body: string, extra = "") => `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;
const OK = json("{}");
/** What a server that times out a keep-alive connection may send as it closes it (RFC 9110 15.5.9). */
const REQUEST_TIMEOUT = "HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";

/**
 * A gzip stream that never ends: a header, then the same deflate segment over and over, each
 * 1 MiB of zeros in about a kilobyte (full flushes make each segment stand alone).
 */
function endlessGzip(): () => Uint8Array {
  const segment = deflateRawSync(Buffer.alloc(MiB), { finishFlush: constants.Z_FULL_FLUSH });
  let first = true;
  return () => {
    if (!first) return segment;
    first = false;
    return Buffer.concat([Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3]), segment]);
  };
}

describe("bounded answers", () => {
  test("a gzip bomb fails with ResponseTooLargeError near the cap, and the connection is dropped", async () => {
    let sent: Promise<number> | undefined;
    const { client, post } = setup((_req, socket) => {
      socket.write("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n");
      const next = endlessGzip();
      sent = pump(socket, () => {
        const piece = next();
        return Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from("\r\n")]);
      });
    }, 4 * MiB);
    const res = await post();
    expect(await res.text().catch((e) => e)).toBeInstanceOf(ResponseTooLargeError);
    // Endless on the wire: only the socket buffers' worth was taken (a few MB of ~1000:1 data), not gigabytes.
    expect(await sent!).toBeLessThan(16 * MiB);
    await until("the client's connections closed", 1_000, () => client.openConnections() === 0);
    expect(client.openConnections()).toBe(0);
  });

  test("an endless chunked body fails at the cap", async () => {
    let sent: Promise<number> | undefined;
    const chunk = Buffer.from(`10000\r\n${"x".repeat(0x10000)}\r\n`);
    const { client, post } = setup((_req, socket) => {
      socket.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n");
      sent = pump(socket, () => chunk);
    });
    const res = await post();
    let read = 0;
    const error = await (async () => {
      for await (const piece of res.body!) read += piece.byteLength;
    })().catch((e) => e);
    expect(error).toBeInstanceOf(ResponseTooLargeError);
    expect(read).toBeLessThanOrEqual(MiB);
    expect(read).toBeGreaterThan(MiB / 2);
    expect(await sent!).toBeLessThan(16 * MiB);
    expect(client.openConnections()).toBe(0);
  });

  test("an announced length over the cap fails the call before the body is read", async () => {
    const { client, post } = setup((_req, socket) => socket.write(`HTTP/1.1 200 OK\r\ncontent-length: ${MiB + 1}\r\n\r\n`));
    expect(await post().catch((e) => e)).toBeInstanceOf(ResponseTooLargeError);
    expect(client.openConnections()).toBe(0);
  });

  test("a body delimited by close fails once it passes the cap", async () => {
    const { post } = setup((_req, socket) => {
      socket.write("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n");
      void pump(socket, () => Buffer.alloc(0x10000, 120));
    });
    expect(await (await post()).arrayBuffer().catch((e) => e)).toBeInstanceOf(ResponseTooLargeError);
  });

  test("an answer exactly at the cap is whole", async () => {
    const body = "x".repeat(MiB);
    const { post } = setup((_req, socket) => socket.write(json(body)));
    expect((await (await post()).text()).length).toBe(MiB);
  });

  test("what goes to fetch is capped too: an announced length, and a body without one", async () => {
    const server = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      fetch: (req) => new URL(req.url).pathname === "/announced"
        ? new Response(Buffer.alloc(2 * MiB))
        : new Response(new ReadableStream({ pull: (c) => c.enqueue(new Uint8Array(0x10000)) })),
    });
    try {
      // GETs (image downloads) are not ours to carry; they go to fetch.
      const client = createHttp1Client({ maxResponseBytes: MiB });
      clients.push(client);
      expect(await client.fetch(`http://127.0.0.1:${server.port}/announced`, { method: "GET" }).catch((e) => e)).toBeInstanceOf(ResponseTooLargeError);
      const endless = await client.fetch(`http://127.0.0.1:${server.port}/endless`, { method: "GET" });
      expect(await endless.arrayBuffer().catch((e) => e)).toBeInstanceOf(ResponseTooLargeError);
      // Under the cap, the answer is untouched.
      const small = await createFetchTransport(MiB)(`http://127.0.0.1:${server.port}/announced`, { method: "GET" }).catch((e) => e);
      expect(small).toBeInstanceOf(ResponseTooLargeError);
      const fine = await createFetchTransport(4 * MiB)(`http://127.0.0.1:${server.port}/announced`, { method: "GET" });
      expect(fine.status).toBe(200);
      expect((await fine.arrayBuffer()).byteLength).toBe(2 * MiB);
    } finally {
      server.stop(true);
    }
  });
});

/**
 * A first request pools the connection; the second meets the fault on that pooled connection,
 * which is where a client is tempted to send it again.
 */
async function secondRequestMeets(fault: (socket: RawSocket) => void) {
  const { upstream, client, post } = setup((request, socket) => (request.index === 1 ? fault(socket) : socket.write(OK)));
  expect((await post('{"n":0}')).status).toBe(200);
  await Bun.sleep(5);
  const outcome = await post('{"n":1}').then((res) => res.text()).catch((e) => e);
  await Bun.sleep(20);
  return { outcome, sent: upstream.requests.filter((r) => r.body === '{"n":1}').length, opened: upstream.opened, client };
}

describe("a request goes upstream again only when no answer byte came back", () => {
  const afterBytes: [string, (socket: RawSocket) => void][] = [
    ["part of the body, then close", (s) => s.end('HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"partial":')],
    ["part of the head, then close", (s) => s.end("HTTP/1.1 200 O")],
    ["part of the head, then a reset", (s) => {
      s.write("HTTP/1.1 200 OK\r\ncontent-");
      s.flush();
      setTimeout(() => s.terminate(), 2);
    }],
    ["a malformed head", (s) => s.write("HTTP/1.1 200 OK\r\nthis is not a header\r\n\r\n{}")],
    ["part of a chunked body, then close", (s) => s.end("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel")],
    ["a malformed chunk size", (s) => s.write("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nxyz\r\nabc\r\n")],
  ];
  for (const [name, fault] of afterBytes) {
    test(`${name}: an error, and the POST arrived exactly once`, async () => {
      const { outcome, sent, opened, client } = await secondRequestMeets(fault);
      expect(outcome).toBeInstanceOf(Error);
      expect(sent).toBe(1);
      expect(opened).toBe(1);
      expect(client.openConnections()).toBe(0);
    });
  }

  test("a pooled connection closed before any answer byte: sent again once, on a new connection", async () => {
    const { outcome, sent, opened } = await secondRequestMeets((s) => s.end());
    expect(outcome).toBe("{}");
    expect(sent).toBe(2);
    expect(opened).toBe(2);
  });

  test("a pooled connection reset before any answer byte: sent again once, on a new connection", async () => {
    const { outcome, sent, opened } = await secondRequestMeets((s) => s.terminate());
    expect(outcome).toBe("{}");
    expect(sent).toBe(2);
    expect(opened).toBe(2);
  });

  test("a 408 on a pooled connection (the server timed it out as the request came): sent again once, on a new connection", async () => {
    const { outcome, sent, opened } = await secondRequestMeets((s) => s.end(REQUEST_TIMEOUT));
    expect(outcome).toBe("{}");
    expect(sent).toBe(2);
    expect(opened).toBe(2);
  });

  test("a 408 on a new connection is the answer: handed over, never sent again", async () => {
    const { upstream, post } = setup((_request, socket) => socket.end(REQUEST_TIMEOUT));
    expect((await post()).status).toBe(408);
    await Bun.sleep(20);
    expect(upstream.requests).toHaveLength(1);
  });

  test("when the new connection fails the same way, the error goes to the caller: never a third send", async () => {
    const { upstream, post } = setup((request, socket) => (request.index === 0 ? socket.write(OK) : socket.end()));
    expect((await post('{"n":0}')).status).toBe(200);
    await Bun.sleep(5);
    const error = await post('{"n":1}').catch((e) => e);
    expect(error).toBeInstanceOf(UpstreamConnectionError);
    await Bun.sleep(20);
    expect(upstream.requests.filter((r) => r.body === '{"n":1}')).toHaveLength(2);
  });

  test("a new connection closed before any answer byte is not retried by the client", async () => {
    const { upstream, post } = setup((_req, socket) => socket.end());
    expect(await post().catch((e) => e)).toBeInstanceOf(UpstreamConnectionError);
    await Bun.sleep(20);
    expect(upstream.requests).toHaveLength(1);
    expect(upstream.opened).toBe(1);
  });
});

describe("connection hygiene", () => {
  test("bytes on an idle pooled connection destroy it; the next request gets its own answer on a new one", async () => {
    const { upstream, client, post } = setup((request, socket) => socket.write(json(request.body)));
    expect(await (await post('{"n":0}')).text()).toBe('{"n":0}');
    expect(client.openConnections()).toBe(1);
    upstream.sockets[0]!.write(json('{"n":"unsolicited"}'));
    await until("the client's connections closed", 1_000, () => client.openConnections() === 0);
    expect(client.openConnections()).toBe(0);
    expect(await (await post('{"n":1}')).text()).toBe('{"n":1}');
    expect(upstream.opened).toBe(2);
  });

  // Each fault on the first answer; the second request must never see its remains.
  const faults: [string, string, "answer" | "error"][] = [
    ["bytes after a Content-Length body", json("{}") + "garbage", "answer"],
    ["a second answer after the first", json("{}") + json('{"second":true}'), "answer"],
    ["an interim answer other than 100", "HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n" + json("{}"), "answer"],
    ["Connection: close", json("{}", "connection: close\r\n"), "answer"],
    ["HTTP/1.0 with keep-alive", "HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\n{}", "answer"],
    ["a body longer than its Content-Length", "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}}", "answer"],
    ["an unknown transfer-encoding", "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\nabc", "error"],
    ["Content-Length and Transfer-Encoding together", "HTTP/1.1 200 OK\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "error"],
    ["chunk data longer than its size", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}}\r\n0\r\n\r\n", "error"],
    ["a malformed chunk size", "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n-2\r\n{}\r\n0\r\n\r\n", "error"],
    ["a status line that is not HTTP/1.1", "HTTP/2 200\r\ncontent-length: 2\r\n\r\n{}", "error"],
    ["a protocol switch", "HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\n\r\n", "error"],
  ];
  for (const [name, wire, expected] of faults) {
    test(`${name}: the connection is destroyed (${expected === "answer" ? "the answer itself is whole" : "the call fails"})`, async () => {
      const { upstream, client, post } = setup((request, socket) => socket.write(request.index === 0 ? wire : json(request.body)));
      const first = await post('{"n":0}').then((res) => res.text()).catch((e) => e);
      if (expected === "answer") expect(first).toBe("{}");
      else expect(first).toBeInstanceOf(Error);
      await until("the client's connections closed", 1_000, () => client.openConnections() === 0);
      expect(client.openConnections()).toBe(0);
      expect(await (await post('{"n":1}')).text()).toBe('{"n":1}');
      expect(upstream.opened).toBe(2);
    });
  }

  test("a late answer already waiting when another connection's callback claims the pooled one is seen first", async () => {
    // The two arrive in the same poll: the trigger first, then the late answer on the pooled
    // connection. Written at once, the request would take the late answer as its own.
    const { upstream, client, post } = setup((request, socket) => socket.write(json(request.body)));
    expect(await (await post('{"n":"first"}')).text()).toBe('{"n":"first"}');
    await Bun.sleep(5);
    let claimed: Promise<string> | undefined;
    let serverEnd: import("bun").Socket<undefined> | undefined;
    const trigger = Bun.listen<undefined>({ hostname: "127.0.0.1", port: 0, socket: { open: (s) => void (serverEnd = s), data() {} } });
    const triggered = await Bun.connect({
      hostname: "127.0.0.1",
      port: trigger.port,
      socket: { data: () => void (claimed ??= post('{"n":"second"}').then((res) => res.text())) },
    });
    try {
      await until("the trigger connection", 1_000, () => serverEnd !== undefined);
      serverEnd!.write("go");
      serverEnd!.flush();
      upstream.sockets[0]!.write(json('{"n":"late"}'));
      upstream.sockets[0]!.flush();
      await until("the second request sent", 1_000, () => claimed !== undefined);
      expect(await claimed!).toBe('{"n":"second"}');
      expect(upstream.opened).toBe(2);
      expect(client.openConnections()).toBe(1);
    } finally {
      triggered.end();
      trigger.stop(true);
    }
  });

  test("every answer copied 0–3 ms late: once the first copy is seen, none of 2,000 requests with nonces gets another's answer (the origin's connections carry one request each)", async () => {
    /** `lateMs(n)`: how late the nth copy goes; a copy still due when the next request comes on its connection goes before that request's answer. */
    const run = async (lateMs: (n: number) => number) => {
      const answer = (nonce: string) => json(JSON.stringify({ nonce }));
      const due = new Map<RawSocket, () => void>();
      let copies = 0;
      const { client, post } = setup((request, socket) => {
        due.get(socket)?.();
        const { nonce } = JSON.parse(request.body) as { nonce: string };
        socket.write(answer(nonce));
        if (nonce.endsWith("-copied")) {
          copies++;
          let timer: ReturnType<typeof setTimeout> | undefined;
          const send = () => {
            clearTimeout(timer);
            due.delete(socket);
            socket.write(answer(nonce));
          };
          due.set(socket, send);
          const delay = lateMs(copies);
          if (delay === 0) setImmediate(() => due.get(socket) === send && send());
          else timer = setTimeout(send, delay);
        }
      });
      // The first copy puts the origin on probation: one request, and its copy landing on the idle
      // connection, which the client closes for it.
      await (await post(JSON.stringify({ nonce: "first-copied" }))).json();
      await until("the first copy sent and its connection closed", 1_000, () => due.size === 0 && client.openConnections() === 0);
      expect(client.openConnections()).toBe(0);
      let next = 0;
      let crossed = 0;
      let failed = 0;
      // Each worker is a client sending its next request as soon as the last is answered.
      const worker = async () => {
        while (next < 2_000) {
          const n = next++;
          const nonce = `nonce-${n}-${Math.random().toString(36).slice(2)}-copied`;
          try {
            const res = await post(JSON.stringify({ nonce }));
            if (((await res.json()) as { nonce: string }).nonce !== nonce) crossed++;
          } catch {
            failed++;
          }
        }
      };
      await Promise.all(Array.from({ length: 8 }, worker));
      client.close();
      return { crossed, failed, copies };
    };
    const rested = await run((n) => n % 4);
    expect(rested.copies).toBe(2_001);
    expect(rested.crossed).toBe(0);
    expect(rested.failed).toBe(0);
  });

  test("on probation, a copy still due when its connection would carry the next request: closing the connection keeps it from that request; reusing it hands the request the copy", async () => {
    // The copy of each answer after the first is held until its connection's next request, so it
    // is still due whatever the machine's speed; the first goes at once, to start the probation.
    const run = async (rest: { reuseAfterMs?: number; reuseOnProbation?: "close" | "rest" }) => {
      const answer = (nonce: string) => json(JSON.stringify({ nonce }));
      const held = new Map<RawSocket, string>();
      const { upstream, client, post } = setup((request, socket) => {
        const copy = held.get(socket);
        held.delete(socket);
        if (copy) socket.write(answer(copy));
        const { nonce } = JSON.parse(request.body) as { nonce: string };
        socket.write(answer(nonce));
        if (nonce === "first") setImmediate(() => socket.write(answer(nonce)));
        else held.set(socket, nonce);
      }, MiB, rest);
      await (await post(JSON.stringify({ nonce: "first" }))).json();
      await until("the client's connections closed", 1_000, () => client.openConnections() === 0);
      expect(client.openConnections()).toBe(0);
      const read = async (nonce: string) => ((await (await post(JSON.stringify({ nonce }))).json()) as { nonce: string }).nonce;
      const first = await read("one");
      const second = await read("two");
      client.close();
      return { first, second, opened: upstream.opened };
    };
    // Closing (the default): each request on a connection of its own, its own answer.
    expect(await run({})).toEqual({ first: "one", second: "two", opened: 3 });
    // Reusing, without a rest: the second request reads the first one's copy as its answer.
    expect(await run({ reuseOnProbation: "rest", reuseAfterMs: 0 })).toEqual({ first: "one", second: "one", opened: 2 });
  });

  test("a 408 on an idle connection (a server's goodbye) closes it without probation: back-to-back requests after it share one connection", async () => {
    const { upstream, client, post } = setup((_request, socket) => socket.write(OK));
    expect(await (await post()).json()).toEqual({});
    upstream.sockets[0]!.end(REQUEST_TIMEOUT);
    await until("the client's connections closed", 1_000, () => client.openConnections() === 0);
    for (let i = 0; i < 10; i++) expect(await (await post()).json()).toEqual({});
    expect(upstream.opened).toBe(2);
  });

  test("an upstream that never sends an answer twice is not on probation: back-to-back requests share one connection", async () => {
    const { upstream, post } = setup((_request, socket) => socket.write(OK));
    for (let i = 0; i < 20; i++) expect(await (await post()).json()).toEqual({});
    expect(upstream.opened).toBe(1);
  });

  test("2,000 requests with nonces, duplicate and unsolicited answers on many connections: no answer reaches another request", async () => {
    let duplicates = 0;
    const answer = (nonce: string) => json(JSON.stringify({ nonce }));
    const socketOf = new Map<string, RawSocket>();
    const { upstream, client, post } = setup((request, socket) => {
      const { nonce, mode } = JSON.parse(request.body) as { nonce: string; mode: number };
      socketOf.set(nonce, socket);
      if (mode === 1) {
        // The answer twice in one write.
        duplicates++;
        socket.write(answer(nonce) + answer(nonce));
      } else if (mode === 2) {
        // Then again in a write of its own, once this turn is over.
        duplicates++;
        socket.write(answer(nonce));
        socket.flush();
        setImmediate(() => socket.write(answer(nonce)));
      } else socket.write(answer(nonce));
    });
    const ROUNDS = 8;
    const PER_ROUND = 250;
    const WORKERS = 16;
    let next = 0;
    let crossed = 0;
    let failed = 0;
    const worker = async (end: number) => {
      while (next < end) {
        const n = next++;
        const nonce = `nonce-${n}-${Math.random().toString(36).slice(2)}`;
        try {
          const res = await post(JSON.stringify({ nonce, mode: n % 7 === 3 ? 1 : n % 7 === 5 ? 2 : 0 }));
          if (n % 7 === 1) {
            // The late answer: it lands after this one was read, just as the connection is freed for the next request.
            duplicates++;
            socketOf.get(nonce)!.write(answer(nonce));
          }
          if (((await res.json()) as { nonce: string }).nonce !== nonce) crossed++;
        } catch {
          failed++;
        }
      }
    };
    for (let round = 1; round <= ROUNDS; round++) {
      await Promise.all(Array.from({ length: WORKERS }, () => worker(round * PER_ROUND)));
      // Between rounds nothing is in flight: answers nobody asked for arrive on idle pooled connections.
      for (const socket of upstream.sockets) {
        if (socket.data.closed) continue;
        socket.write(answer("unsolicited"));
        duplicates++;
      }
      await until("the client's connections closed", 1_000, () => client.openConnections() === 0);
    }
    expect(crossed).toBe(0);
    expect(failed).toBe(0);
    expect(duplicates).toBeGreaterThan(600);
    // Every fault cost its connection.
    expect(upstream.opened).toBeGreaterThan(600);
    expect(upstream.requests.length).toBeGreaterThanOrEqual(ROUNDS * PER_ROUND);
    expect(client.openConnections()).toBeLessThanOrEqual(WORKERS);
  });
});

describe("through the gateway", () => {
  const TOO_LARGE = "The upstream provider sent an answer larger than the gateway accepts.";
  const ask = { model: OPENAI_MODEL, max_tokens: 50, messages: [{ role: "user", content: "Hello" }] };
  const completion = JSON.stringify({
    id: "chatcmpl-1", object: "chat.completion", created: 1, model: "gpt-4o-mini",
    choices: [{ index: 0, message: { role: "assistant", content: "Hi" }, finish_reason: "stop" }],
    usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 },
  });

  async function gatewayOver(answer: (request: RawRequest, socket: RawSocket) => void, maxImageBytes?: number) {
    const upstream = rawUpstream(answer);
    upstreams.push(upstream);
    const gw = await startGateway({ upstreamUrl: upstream.url, maxResponseBytes: MiB, maxImageBytes, retry: { max_retries: 2 } });
    return { upstream, gw, before: await gw.balanceMicro() };
  }

  const oversized: [string, (socket: RawSocket) => void][] = [
    ["an announced length", (s) => s.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${2 * MiB}\r\n\r\n{"id":`)],
    ["an endless chunked body", (s) => {
      s.write("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n");
      const chunk = Buffer.from(`10000\r\n${" ".repeat(0x10000)}\r\n`);
      void pump(s, () => chunk);
    }],
    ["a gzip bomb", (s) => {
      s.write("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n");
      const next = endlessGzip();
      void pump(s, () => {
        const piece = next();
        return Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from("\r\n")]);
      });
    }],
  ];
  for (const [name, answer] of oversized) {
    test(`a non-stream answer over the cap (${name}): 502 with its own message, sent once, nothing charged`, async () => {
      const { upstream, gw, before } = await gatewayOver((_req, socket) => answer(socket));
      try {
        const res = await postToGateway(gw, "/v1/chat/completions", ask);
        expect(res.status).toBe(502);
        expect(await res.json()).toMatchObject({ error: { message: TOO_LARGE, type: "upstream_error" } });
        expect(upstream.requests).toHaveLength(1);
        expect(await gw.balanceMicro()).toBe(before);
      } finally {
        await gw.stop();
      }
    });
  }

  test("a non-stream answer over the cap that the request asked for (n answers with logprobs): a 400 saying how to ask for less, its prompt charged, asked once", async () => {
    // 8 answers of up to 200 tokens with 20 logprobs each may well pass 1 MiB: the vendor made (and
    // billed) it. Free and a 502, it was asked of every fallback and again by the SDK's retries.
    const { upstream, gw, before } = await gatewayOver((_req, socket) => oversized[0]![1](socket));
    try {
      const res = await postToGateway(gw, "/v1/chat/completions", { ...ask, models: [OPENAI_MODEL, OPENAI_MODEL], max_tokens: 200, n: 8, logprobs: true, top_logprobs: 20 });
      expect(res.status).toBe(400);
      const error = ((await res.json()) as { error: { message: string; type: string } }).error;
      expect(error.type).toBe("invalid_request_error");
      expect(error.message).toContain(`larger than the gateway relays (${MiB} bytes)`);
      expect(error.message).toContain("fewer choices (n) or no logprobs");
      expect(upstream.requests).toHaveLength(1);
      await gw.app.services.settled();
      const record = gw.db.query<{ status: string; prompt_tokens: number; completion_tokens: number; cost_micro: number }, []>("SELECT status, prompt_tokens, completion_tokens, cost_micro FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
      expect(record).toMatchObject({ status: "cancelled", completion_tokens: 0 });
      expect(record.prompt_tokens).toBeGreaterThan(0);
      expect(before - (await gw.balanceMicro())).toBe(record.cost_micro);
      expect(record.cost_micro).toBeGreaterThan(0);
    } finally {
      await gw.stop();
    }
  });

  test("an embeddings answer is read no further than vectors of 16,384 dimensions for its inputs, not to the 64 MiB cap: a free 502; a server that ignores `dimensions` still answers (a raw-TCP probe: forty gzip bombs stalled the gateway 2.8 s)", async () => {
    let endless = true;
    let accepted: Promise<number> = Promise.resolve(0);
    const vector = Array.from({ length: 3_072 }, (_, i) => Math.sin(i) / 10);
    const upstream = rawUpstream((_req, socket) => {
      if (!endless) {
        // 3,072 dimensions when 256 were asked, pretty-printed as some servers write them.
        const body = JSON.stringify({ object: "list", data: [{ object: "embedding", index: 0, embedding: vector }], model: "text-embedding-3-large", usage: { prompt_tokens: 3, total_tokens: 3 } }, null, 6);
        socket.write(json(body));
        return;
      }
      socket.write("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n");
      const piece = Buffer.from(`10000\r\n${" ".repeat(0x10000)}\r\n`);
      let sent = 0;
      accepted = pump(socket, () => (sent++ > 1280 ? null : piece));
    });
    upstreams.push(upstream);
    const model = { id: "test/embed", provider: "fake-openai", upstream_model: "text-embedding-3-large", category: "embedding", context_length: 8192, pricing: { input_per_mtok: 100, output_per_mtok: 0 } };
    const gw = await startGateway({ upstreamUrl: upstream.url, extraModels: [model], retry: { max_retries: 0 } });
    try {
      const before = await gw.balanceMicro();
      const res = await postToGateway(gw, "/v1/embeddings", { model: model.id, input: "Hello", dimensions: 256, encoding_format: "float" });
      expect(res.status).toBe(502);
      expect(await res.json()).toMatchObject({ error: { message: "The upstream provider sent an answer larger than the gateway accepts." } });
      // The kernel's buffers besides the ~0.6 MiB read: a few MiB at most; unbounded, 64 MiB.
      expect(await accepted).toBeLessThan(16 * MiB);
      expect(await gw.balanceMicro()).toBe(before);
      endless = false;
      const sound = await postToGateway(gw, "/v1/embeddings", { model: model.id, input: "Hello", dimensions: 256, encoding_format: "float" });
      expect(sound.status).toBe(200);
      expect(((await sound.json()) as { data: { embedding: number[] }[] }).data[0]!.embedding).toHaveLength(3_072);
    } finally {
      await gw.stop();
    }
  });

  const malformed: [string, string][] = [
    ["a folded header line", `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-fold: a\r\n  b\r\ncontent-length: ${completion.length}\r\n\r\n${completion}`],
    ["both Content-Length and Transfer-Encoding", `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${completion.length}\r\ntransfer-encoding: chunked\r\n\r\n${completion.length.toString(16)}\r\n${completion}\r\n0\r\n\r\n`],
    ["a chunk size that is not hex", `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n${completion}\r\n0\r\n\r\n`],
  ];
  for (const [name, bytes] of malformed) {
    test(`an answer that is not HTTP/1.1 we can read (${name}): 502 "unreadable answer", classed bad_answer (it was reached), nothing charged`, async () => {
      const { gw, before } = await gatewayOver((_req, socket) => {
        socket.write(bytes);
        socket.end();
      });
      try {
        const res = await postToGateway(gw, "/v1/chat/completions", ask);
        expect(res.status).toBe(502);
        expect(await res.json()).toMatchObject({ error: { message: "The upstream provider sent an unreadable answer. Retrying is appropriate.", type: "upstream_error" } });
        const metrics = await (await fetch(`${gw.url}/metrics`)).text();
        expect(metrics).toMatch(/switchyard_upstream_errors_total\{provider="fake-openai",class="bad_answer"\} [1-9]/);
        expect(metrics).not.toMatch(/switchyard_upstream_errors_total\{provider="fake-openai",class="connect"\} [1-9]/);
        expect(await gw.balanceMicro()).toBe(before);
      } finally {
        await gw.stop();
      }
    });
  }

  test("the same answers through fetch (a proxy configured): unreadable, classed bad_answer, not an upstream that could not be reached; broken chunks mid-stream are malformed data", async () => {
    // Bun's fetch refuses them with TypeErrors (Malformed_HTTP_Response, InvalidContentLength,
    // UnsupportedTransferEncoding, InvalidHTTPResponse), which were passed on as connect failures;
    // both lengths it read as chunks (a 200), where our own client refuses the answer.
    const cases = [
      ...malformed,
      ["a Content-Length with a sign", `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: +${completion.length}\r\n\r\n${completion}`],
      ["a transfer coding twice", `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked, chunked\r\n\r\n${completion.length.toString(16)}\r\n${completion}\r\n0\r\n\r\n`],
    ];
    let bytes = "";
    const upstream = rawUpstream((_req, socket) => socket.end(bytes));
    upstreams.push(upstream);
    const gw = await startGateway({ upstreamUrl: upstream.url, upstreamViaProxy: true, retry: { max_retries: 0 } });
    try {
      const before = await gw.balanceMicro();
      for (const [name, answer] of cases) {
        bytes = answer!;
        const res = await postToGateway(gw, "/v1/chat/completions", ask);
        expect([name, res.status]).toEqual([name, 502]);
        expect(await res.json()).toMatchObject({ error: { message: "The upstream provider sent an unreadable answer. Retrying is appropriate.", type: "upstream_error" } });
      }
      const metrics = await (await fetch(`${gw.url}/metrics`)).text();
      expect(metrics).toContain(`switchyard_upstream_errors_total{provider="fake-openai",class="bad_answer"} ${cases.length}`);
      expect(metrics).not.toMatch(/switchyard_upstream_errors_total\{provider="fake-openai",class="connect"\} [1-9]/);
      // A chunk size that is not hex after the first frame went out: an error frame saying so.
      const frame = `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { content: "Hi" }, finish_reason: null }] })}\n\n`;
      bytes = `HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n${frame.length.toString(16)}\r\n${frame}\r\n`;
      const upstreamBroken = rawUpstream((_req, socket) => {
        socket.write(bytes);
        setTimeout(() => socket.end("zz\r\n"), 50);
      });
      upstreams.push(upstreamBroken);
      const streamed = await startGateway({ upstreamUrl: upstreamBroken.url, upstreamViaProxy: true, retry: { max_retries: 0 } });
      try {
        const res = await postToGateway(streamed, "/v1/chat/completions", { ...ask, stream: true });
        expect(res.status).toBe(200);
        const text = await res.text();
        expect(text).toContain('"content":"Hi"');
        expect(text).toContain("The upstream provider sent malformed data.");
      } finally {
        await streamed.stop();
      }
      expect(await gw.balanceMicro()).toBe(before);
    } finally {
      await gw.stop();
    }
  });

  test("chunk lines ended by bare LFs on a connection held open: a 502 at once, not at the idle limit, stream or not; nothing charged", async () => {
    const { gw, before } = await gatewayOver((request, socket) => {
      const type = JSON.parse(request.body).stream ? "text/event-stream" : "application/json";
      const frame = type === "text/event-stream" ? `data: ${completion}\n\n` : completion;
      // The upstream keeps the connection: only the framing says the answer is broken.
      socket.write(`HTTP/1.1 200 OK\r\ncontent-type: ${type}\r\ntransfer-encoding: chunked\r\n\r\n${frame.length.toString(16)}\n${frame}\n0\n\n`);
    });
    try {
      for (const stream of [false, true]) {
        const started = performance.now();
        const res = await postToGateway(gw, "/v1/chat/completions", { ...ask, stream });
        expect(res.status).toBe(502);
        expect((await res.json()) as any).toMatchObject({ error: { type: "upstream_error" } });
        // The gateway's idle limit here is 30 s, its first-byte limit 10 s.
        expect(performance.now() - started).toBeLessThan(2_000);
      }
      expect(await gw.balanceMicro()).toBe(before);
    } finally {
      await gw.stop();
    }
  });

  test("a stream over the cap ends with an error frame, and what was sent before it is charged, as any stream cut short", async () => {
    const frame = Buffer.from(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"${"x".repeat(4000)}"},"finish_reason":null}]}\n\n`);
    const chunk = Buffer.concat([Buffer.from(`${frame.length.toString(16)}\r\n`), frame, Buffer.from("\r\n")]);
    const { gw, before } = await gatewayOver((_req, socket) => {
      socket.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n");
      void pump(socket, () => chunk);
    });
    try {
      // The model's whole answer limit (8,192 tokens): the size cap bites before the limit would.
      const res = await postToGateway(gw, "/v1/chat/completions", { ...ask, max_tokens: 8_192, stream: true });
      expect(res.status).toBe(200);
      const text = await res.text();
      expect(text.length).toBeGreaterThan(MiB / 2);
      expect(text).toContain(TOO_LARGE);
      const after = await gw.balanceMicro();
      const record = gw.db.query<{ status: string; completion_tokens: number; cost_micro: number }, []>("SELECT status, completion_tokens, cost_micro FROM usage_records ORDER BY id DESC LIMIT 1").get()!;
      // What went out: hundreds of 4,000-character deltas, counted (no usage chunk came), more than
      // the request's max_tokens, so charged at that (the hold's bound).
      expect(record.status).toBe("stream_failed");
      expect(record.completion_tokens).toBe(8_192);
      expect(record.cost_micro).toBeGreaterThan(0);
      expect(before - after).toBe(record.cost_micro);
    } finally {
      await gw.stop();
    }
  });

  test("an image download that announces more than the cap is refused like an image too large (502, nothing charged)", async () => {
    // The image cap is set above the answer cap here, so the transport's cap is the one that bites.
    const { upstream, gw, before } = await gatewayOver((request, socket) => {
      if (request.raw.startsWith("GET ")) return void socket.write(`HTTP/1.1 200 OK\r\ncontent-type: image/png\r\ncontent-length: ${2 * MiB}\r\n\r\n\x89PNG`);
      const answer = JSON.stringify({
        id: "c", object: "chat.completion", created: 1, model: "flux-chat",
        choices: [{ index: 0, message: { role: "assistant", content: "", images: [{ type: "image_url", image_url: { url: `${upstream.url}/files/out.png` } }] }, finish_reason: "stop" }],
        usage: { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 },
      });
      socket.write(json(answer));
    }, 4 * MiB);
    try {
      const res = await postToGateway(gw, "/v1/chat/completions", { ...ask, model: IMAGE_CHAT_MODEL });
      expect(res.status).toBe(502);
      expect(await res.json()).toMatchObject({ error: { message: "The upstream provider made an image larger than the gateway accepts." } });
      expect(upstream.requests.map((r) => r.raw.slice(0, 4))).toEqual(["POST", "GET "]);
      expect(await gw.balanceMicro()).toBe(before);
    } finally {
      await gw.stop();
    }
  });

  test("an answer cut off after its first bytes is a 502, and the vendor saw the request once", async () => {
    const { upstream, gw, before } = await gatewayOver((request, socket) => {
      if (request.index === 0) socket.write(json(completion));
      else socket.end(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${completion.length}\r\n\r\n${completion.slice(0, 40)}`);
    });
    try {
      // The first request leaves a pooled connection behind; the second meets the fault on it.
      expect((await postToGateway(gw, "/v1/chat/completions", ask)).status).toBe(200);
      const spent = before - (await gw.balanceMicro());
      const res = await postToGateway(gw, "/v1/chat/completions", ask);
      expect(res.status).toBe(502);
      await Bun.sleep(20);
      expect(upstream.requests).toHaveLength(2);
      expect(before - (await gw.balanceMicro())).toBe(spent);
    } finally {
      await gw.stop();
    }
  });
});
