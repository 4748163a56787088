import { afterAll, beforeAll, expect, test } from "bun:test";
import { fullGC, heapStats } from "bun:jsc";
import type { Socket } from "bun";
import { rawUpstream, type RawSocket, type RawUpstream } from "../helpers/raw-upstream.ts";
import { OPENAI_MODEL, startGateway, type Gateway } from "../helpers/gateway.ts";
import { until } from "../helpers/until.ts";

/**
 * What a request keeps alive while it waits for its upstream. Every young collection in that
 * time visits all of it and moves it to the old generation, where it dies later: with 32
 * requests under way the gateway's young collections took 1.2–2.3 ms each against the floor's
 * 0.67 (docs/decisions.md, "What young collections cost us"). The billing session, the attempt,
 * the route and the upstream exchange made 14 functions and 9 scopes a request more than now, each
 * kept to the end: methods of an object literal, listeners and helpers written as closures. They
 * are classes, module functions and values now (the deadline is the client's abort listener
 * itself, the exchange its deadline's).
 *
 * Counted, not timed: requests are sent on raw sockets that were opened first, the upstream (a
 * raw socket that answers only when told) receives every one, and the heap's functions are
 * counted against the moment before they were sent. Kept connections to the upstream are made
 * by a first round, so the second round opens none.
 */

const REQUESTS = 80;
const BODY = JSON.stringify({ model: OPENAI_MODEL, max_tokens: 20, messages: [{ role: "user", content: "Hello there" }] });
const ANSWER = JSON.stringify({
  id: "chatcmpl-1", object: "chat.completion", created: 1, model: "gpt-4o-mini",
  choices: [{ index: 0, message: { role: "assistant", content: "Hi" }, finish_reason: "stop" }],
  usage: { prompt_tokens: 9, completion_tokens: 1, total_tokens: 10 },
});
const RESPONSE = `HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(ANSWER)}\r\n\r\n${ANSWER}`;

let upstream: RawUpstream;
let gw: Gateway;
/** Requests the upstream holds, unanswered. */
const waiting: RawSocket[] = [];

beforeAll(async () => {
  upstream = rawUpstream((_request, socket) => {
    waiting.push(socket);
  });
  gw = await startGateway({ upstreamUrl: upstream.url });
});

afterAll(async () => {
  await gw.stop();
  upstream.stop();
});

interface Client {
  socket: Socket<undefined>;
  answered: boolean;
}

async function openClients(n: number): Promise<Client[]> {
  const url = new URL(gw.url);
  return Promise.all(Array.from({ length: n }, async () => {
    const client = { answered: false } as Client;
    client.socket = await Bun.connect({
      hostname: url.hostname,
      port: Number(url.port),
      socket: {
        data(_socket, bytes) {
          if (bytes.toString("latin1").includes('"object":"chat.completion"')) client.answered = true;
        },
      },
    });
    return client;
  }));
}

const request = () =>
  `POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer ${gw.key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(BODY)}\r\n\r\n${BODY}`;

/** Sends one request on every client, waits until the upstream holds them all; answers them after `during`. */
async function round(clients: Client[], during?: () => void): Promise<void> {
  for (const c of clients) c.answered = false;
  for (const c of clients) c.socket.write(request());
  await until("every request at the upstream", 10_000, () => waiting.length === clients.length);
  during?.();
  for (const socket of waiting.splice(0)) socket.write(RESPONSE);
  await until("every answer", 10_000, () => clients.every((c) => c.answered));
}

test("a request waiting for its upstream keeps few functions of its own: the billing session, the attempt, the route and the upstream exchange make no closures for it", async () => {
  const clients = await openClients(REQUESTS);
  // The first round opens the gateway's connections to the upstream (and warms every path).
  await round(clients);
  await gw.app.services.settled();
  expect(upstream.opened).toBeGreaterThan(0);
  const opened = upstream.opened;

  fullGC();
  const before = heapStats().objectTypeCounts;
  let during: Record<string, number> = {};
  await round(clients, () => {
    fullGC();
    during = heapStats().objectTypeCounts;
  });
  // The second round used the kept connections: what was counted is the requests' own.
  expect(upstream.opened).toBe(opened);
  const perRequest = (type: string) => ((during[type] ?? 0) - (before[type] ?? 0)) / REQUESTS;

  // 23 functions and 23 scopes a request before (the session's methods and getter, `refused`,
  // `inline`, `onClientAbort`, `sessionOf`, `onStream`, `prompt`, `onCharged`, the deadline's
  // timer callback, the upstream exchange's abort listener and body-queue callbacks); 9 and 14
  // now: the suspended async functions' own, the exchange's promise resolvers, Elysia's, the
  // request-id logger.
  expect(perRequest("Function")).toBeLessThan(11);
  expect(perRequest("JSLexicalEnvironment")).toBeLessThan(16);

  await gw.app.services.settled();
  for (const c of clients) c.socket.end();
});
