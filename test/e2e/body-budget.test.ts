/**
 * Request bodies still arriving are bounded per key, in all and in time (limits/body-budget.ts,
 * plugins/json-body.ts). A hostile-tenant probe held 100 bodies of 10 MB one byte short of their
 * end, a byte every 30 s: RSS went from 119 MB to 1.2 GB, whatever the key's rate limit, and
 * max_concurrent_requests never saw them. Each held body here is a raw socket that sends its
 * head and part of its body, then waits.
 */
import { afterEach, describe, expect, setDefaultTimeout, test } from "bun:test";
import net from "node:net";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { OPENAI_MODEL, post, startGateway, useGateway, type Gateway } from "../helpers/gateway.ts";

const MAX_BODY = 256 * 1024;
/** The largest body a console request may declare (http/console/console-api.ts). */
const CONSOLE_BODY = 64 * 1024;
const PER_KEY = 512 * 1024;
const PER_ACCOUNT = 768 * 1024;
const TOTAL = 1024 * 1024;
const TIMEOUT_MS = 8000;
/**
 * The timeout the tests that wait it out are given, on a gateway of their own: the file's 8 s
 * leaves the other tests' held bodies (a few hundred ms, more on a loaded machine) well inside it.
 */
const QUICK_TIMEOUT_MS = 1000;
const ADMIN_TOKEN = "admin-token-for-body-budget-tests-0123456789";

setDefaultTimeout(20_000);

const upstream = useFakeUpstream();
const gatewayOptions = (bodyTimeoutMs: number) => ({
  upstreamUrl: upstream.url,
  adminToken: ADMIN_TOKEN,
  limits: { max_body_bytes: MAX_BODY, body_per_key_bytes: PER_KEY, body_per_account_bytes: PER_ACCOUNT, body_total_bytes: TOTAL, body_timeout_ms: bodyTimeoutMs },
});
const gw = useGateway(() => gatewayOptions(TIMEOUT_MS));

interface Answer { status: number; headers: Record<string, string>; body: string; closedByServer: boolean }
interface Held {
  /** The answer, once the server gave one and closed (or the test ended the socket). */
  answer: Promise<Answer>;
  /** The first whole response, the connection kept (or the answer, if it closed first). */
  response: Promise<Answer>;
  /** Sends more of the body. */
  send(bytes: string): void;
}

const open: net.Socket[] = [];
afterEach(async () => {
  for (const socket of open.splice(0)) socket.destroy();
  // The gateway sees the closes and gives the bodies' shares back.
  await Bun.sleep(100);
});

/**
 * Still waiting after the gateway had time to answer: its body was taken in, not refused. Several
 * are watched at once (`held.map(stillWaiting)`), each its own 100 ms, not one after another.
 */
async function stillWaiting(h: Held): Promise<boolean> {
  return (await Promise.race([h.answer.then(() => false), Bun.sleep(100).then(() => true)]));
}

/** A request whose head says `length` (or chunked) and whose body has only `first` on its way. */
function hold(o: { path?: string; auth?: string; length?: number; first: string; anthropic?: boolean; from?: string; via?: Gateway }): Held {
  const to = o.via ?? gw;
  const socket = net.connect({ port: Number(new URL(to.url).port), host: "127.0.0.1", localAddress: o.from });
  open.push(socket);
  const chunked = o.length === undefined;
  const piece = (text: string) => (chunked ? `${text.length.toString(16)}\r\n${text}\r\n` : text);
  let received = "";
  let closedByServer = false;
  socket.on("data", (d) => (received += d.toString("latin1")));
  socket.on("end", () => (closedByServer = true));
  socket.on("error", () => (closedByServer = true));
  const auth = o.auth ?? (o.anthropic ? `x-api-key: ${to.key}` : `authorization: Bearer ${to.key}`);
  socket.write(`POST ${o.path ?? "/v1/chat/completions"} HTTP/1.1\r\nhost: 127.0.0.1\r\n${auth}\r\ncontent-type: application/json\r\n`
    + (chunked ? "transfer-encoding: chunked\r\n" : `content-length: ${o.length}\r\n`) + "\r\n" + piece(o.first));
  const parse = (): Answer & { complete: boolean } => {
    const split = received.indexOf("\r\n\r\n");
    const [statusLine, ...lines] = received.slice(0, Math.max(0, split)).split("\r\n");
    const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]));
    const body = received.slice(split + 4);
    const complete = split >= 0 && headers["content-length"] !== undefined && body.length >= Number(headers["content-length"]);
    return { status: Number(statusLine?.split(" ")[1] ?? 0), headers, body, closedByServer, complete };
  };
  const answer = new Promise<Answer>((resolve) => socket.on("close", () => resolve(parse())));
  const response = new Promise<Answer>((resolve) => {
    socket.on("data", () => {
      const now = parse();
      if (now.complete) resolve(now);
    });
    void answer.then(resolve);
  });
  return {
    answer,
    response,
    send: (bytes) => void socket.write(piece(bytes)),
  };
}

/** A chat request's JSON padded to exactly `length` bytes. */
function paddedChat(length: number): string {
  const head = `{"model":"${OPENAI_MODEL}","messages":[{"role":"user","content":"hi"}],"metadata":{"pad":"`;
  return head + "p".repeat(length - head.length - 3) + '"}}';
}

/** Lets the gateway take the held requests in (their heads parsed, their reads started). */
const settle = () => Bun.sleep(150);

async function secondKey(g: Gateway): Promise<string> {
  const account = await g.app.services.accounts.createAccount("other tenant", 1000e6);
  return (await g.app.services.accounts.createKey(account.id, "other"))!.key;
}

describe("bodies on their way, per key", () => {
  test("a key whose held bodies fill its share gets 429 on arrival (connection closed, nothing read), while another key is served", async () => {
    const held = [hold({ length: MAX_BODY, first: "{" }), hold({ length: MAX_BODY, first: "{" })];
    await settle();
    const refused = hold({ length: MAX_BODY, first: "{" });
    const answer = await refused.answer;
    expect(answer.status).toBe(429);
    expect(answer.headers["retry-after"]).toBe("1");
    expect(answer.closedByServer).toBe(true);
    const error = JSON.parse(answer.body).error;
    expect(error.type).toBe("rate_limit_error");
    expect(error.code).toBe("rate_limit_exceeded");
    expect(error.message).toContain("for this key");

    // Anthropic's shape on /v1/messages.
    // (A small body is refused with its connection kept, as any small refused body is: `response`.)
    const anthropic = await hold({ path: "/v1/messages", anthropic: true, length: 1000, first: "{" }).response;
    expect(anthropic.status).toBe(429);
    expect(JSON.parse(anthropic.body)).toMatchObject({ type: "error", error: { type: "rate_limit_error" } });

    // Another tenant is not held up by this one's bodies.
    const other = await secondKey(gw);
    const res = await fetch(`${gw.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${other}`, "content-type": "application/json" }, body: paddedChat(MAX_BODY) });
    expect(res.status).toBe(200);

    // A held body that arrives in the end is answered.
    held[0]!.send(paddedChat(MAX_BODY).slice(1));
    expect((await held[0]!.response).status).toBe(200);
  });

  test("what a body took is given back once it has arrived: the same key can send again", async () => {
    const body = paddedChat(MAX_BODY);
    const first = hold({ length: MAX_BODY, first: body.slice(0, 10) });
    const second = hold({ length: MAX_BODY, first: body.slice(0, 10) });
    await settle();
    first.send(body.slice(10));
    second.send(body.slice(10));
    expect((await first.response).status).toBe(200);
    expect((await second.response).status).toBe(200);
    // The whole share again: two bodies held fit, and then a third does not.
    const again = [hold({ length: MAX_BODY, first: "{" }), hold({ length: MAX_BODY, first: "{" })];
    await settle();
    for (const waiting of again.map(stillWaiting)) expect(await waiting).toBe(true);
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] });
    expect(res.status).toBe(429);
  });

  test("a chunked body takes its pieces as they come: past the key's share it is refused mid-read and cut off", async () => {
    const big = hold({ first: "{" + "x".repeat(200 * 1024) });
    const second = hold({ first: "{" + "x".repeat(200 * 1024) });
    await settle();
    const third = hold({ first: "{" + "x".repeat(64 * 1024) });
    await settle();
    third.send("y".repeat(100 * 1024));
    const answer = await third.answer;
    expect(answer.status).toBe(429);
    expect(answer.closedByServer).toBe(true);
    expect(JSON.parse(answer.body).error.message).toContain("for this key");
    // The two before it were taken in, not refused.
    for (const waiting of [big, second].map(stillWaiting)) expect(await waiting).toBe(true);
  });
});

describe("bodies on their way, everyone's", () => {
  test("when all keys' held bodies fill the total, the next body gets 503 (the gateway's, not the key's)", async () => {
    const keys = [await secondKey(gw), await secondKey(gw)];
    const held = [
      hold({ length: MAX_BODY, first: "{" }), hold({ length: MAX_BODY, first: "{" }),
      hold({ auth: `authorization: Bearer ${keys[0]}`, length: MAX_BODY, first: "{" }), hold({ auth: `authorization: Bearer ${keys[0]}`, length: MAX_BODY, first: "{" }),
    ];
    await settle();
    const answer = await hold({ auth: `authorization: Bearer ${keys[1]}`, length: 100 * 1024, first: "{" }).answer;
    expect(answer.status).toBe(503);
    expect(answer.headers["retry-after"]).toBe("1");
    expect(answer.closedByServer).toBe(true);
    // OpenAI's type for its own 503s.
    expect(JSON.parse(answer.body).error).toMatchObject({ type: "server_error", message: "The gateway is receiving too many request bodies at once. Retry in a second." });
    for (const waiting of held.map(stillWaiting)) expect(await waiting).toBe(true);
  });

  test("requests without a key (the console's) count per client address in a pool of their own: they cannot fill the tenants' total", async () => {
    // 256 KiB per address: four console bodies of the largest size (64 KiB) from one address, then it is refused; another address is not.
    const signIn = (from?: string, length = CONSOLE_BODY) => hold({ path: "/console/api/sign-in", auth: "x-probe: anonymous", length, first: "{", from });
    const held = [signIn(), signIn(), signIn(), signIn()];
    await settle();
    const answer = await signIn().response;
    expect(answer.status).toBe(429);
    expect(JSON.parse(answer.body).error.message).toContain("from this address");
    const elsewhere = signIn("127.0.0.2");
    await settle();
    expect(await stillWaiting(elsewhere)).toBe(true);
    // The tenants' shares are apart from the anonymous pool: a key's largest body is served meanwhile.
    const res = await fetch(`${gw.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" }, body: paddedChat(MAX_BODY) });
    expect(res.status).toBe(200);
    for (const waiting of held.map(stillWaiting)) expect(await waiting).toBe(true);
    // A sign-in's size of body has a lane of its own: the same full address still signs in.
    const small = await fetch(`${gw.url}/console/api/sign-in`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ login: "nobody@example.com", password: "not the password at all" }) });
    expect(small.status).toBe(401);
  });

  test("a console body larger than any of its forms is refused as too large (413) on arrival, not counted in the pool; one without a length (chunked) is refused (411) rather than read to the gateway's limit", async () => {
    const big = await hold({ path: "/console/api/sign-in", auth: "x-probe: anonymous", length: CONSOLE_BODY + 1, first: "{" }).response;
    expect(big.status).toBe(413);
    expect(JSON.parse(big.body).error.type).toBe("invalid_request_error");
    const chunked = await hold({ path: "/console/api/sign-in", auth: "x-probe: anonymous", first: "{" }).response;
    expect(chunked.status).toBe(411);
    expect(JSON.parse(chunked.body).error.message).toContain("Content-Length");
  });

  test("slow console bodies from many addresses fill the anonymous pool (503 for another large one), yet sign-ins from anywhere are still answered (a security probe: 16 addresses blocked every sign-in)", async () => {
    // 16 MiB in all: 64 addresses × four bodies of 64 KiB.
    const held: Held[] = [];
    for (let a = 1; a <= 64; a++) for (let i = 0; i < 4; i++) held.push(hold({ path: "/console/api/sign-in", auth: "x-probe: anonymous", length: CONSOLE_BODY, first: "{", from: `127.0.1.${a}` }));
    await Bun.sleep(500);
    const full = await hold({ path: "/console/api/sign-in", auth: "x-probe: anonymous", length: CONSOLE_BODY, first: "{", from: "127.0.2.1" }).response;
    expect(full.status).toBe(503);
    const wrong = JSON.stringify({ token: "wrong".padEnd(47, "x") });
    for (const from of ["127.0.2.2", "127.0.1.1"]) {
      const signIn = hold({ path: "/console/api/sign-in", auth: "x-probe: anonymous", length: wrong.length, first: wrong, from });
      expect((await signIn.response).status).toBe(401);
    }
    expect(await stillWaiting(held[0]!)).toBe(true);
  });

  test("an account's keys together hold at most its share: a second key of a full account is refused (429), another account's is served", async () => {
    const second = (await gw.app.services.accounts.createKey(gw.accountId, "second key"))!.key;
    const other = await secondKey(gw);
    const held = [hold({ length: MAX_BODY, first: "{" }), hold({ length: MAX_BODY, first: "{" }), hold({ auth: `authorization: Bearer ${second}`, length: MAX_BODY, first: "{" })];
    await settle();
    for (const waiting of held.map(stillWaiting)) expect(await waiting).toBe(true);
    const refused = await hold({ auth: `authorization: Bearer ${second}`, length: 1000, first: "{" }).response;
    expect(refused.status).toBe(429);
    expect(JSON.parse(refused.body).error.message).toContain("for this account (limits.body_per_account_bytes)");
    const res = await fetch(`${gw.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${other}`, "content-type": "application/json" }, body: paddedChat(MAX_BODY) });
    expect(res.status).toBe(200);
  });

  test("the admin token's requests are not counted (the operator is not a tenant)", async () => {
    const auth = `authorization: Bearer ${ADMIN_TOKEN}`;
    const held = Array.from({ length: 6 }, () => hold({ path: "/v1/admin/accounts", auth, length: MAX_BODY, first: "{" }));
    await settle();
    for (const waiting of held.map(stillWaiting)) expect(await waiting).toBe(true);
  });
});

describe("a body that does not arrive in time", () => {
  const quick = useGateway(() => gatewayOptions(QUICK_TIMEOUT_MS));
  test.each([["Content-Length", MAX_BODY], ["chunked", undefined]] as const)("%s: a byte now and then is cut off at body_timeout_ms with 408, and its share is given back", async (_framing, length) => {
    const slow = hold({ length, first: "{", via: quick });
    const started = Date.now();
    const drip = setInterval(() => slow.send(" "), 200);
    const answer = await slow.answer;
    clearInterval(drip);
    const took = Date.now() - started;
    expect(answer.status).toBe(408);
    expect(answer.closedByServer).toBe(true);
    const error = JSON.parse(answer.body).error;
    expect(error.type).toBe("timeout_error");
    expect(error.message).toBe("The request body did not arrive within 1 s (limits.body_timeout_ms).");
    expect(took).toBeGreaterThanOrEqual(QUICK_TIMEOUT_MS - 50);
    expect(took).toBeLessThan(QUICK_TIMEOUT_MS + 2000);
    // Operators see them: a rejection of their own reason.
    const metrics = await (await fetch(`${quick.url}/metrics`)).text();
    expect(Number(metrics.match(/switchyard_rejections_total\{reason="body_timeout"\} (\d+)/)?.[1] ?? 0)).toBeGreaterThanOrEqual(1);
    // Given back: the key can hold its whole share again and still nothing more.
    const held = [hold({ length: MAX_BODY, first: "{", via: quick }), hold({ length: MAX_BODY, first: "{", via: quick })];
    await settle();
    for (const waiting of held.map(stillWaiting)) expect(await waiting).toBe(true);
    expect((await hold({ length: 1000, first: "{", via: quick }).response).status).toBe(429);
  });

  test("a client that ends its connection mid-body gives its share back", async () => {
    for (const chunked of [false, true]) {
      const gone = [hold({ length: chunked ? undefined : MAX_BODY, first: "{" + "x".repeat(chunked ? 250 * 1024 : 0) }), hold({ length: chunked ? undefined : MAX_BODY, first: "{" + "x".repeat(chunked ? 250 * 1024 : 0) })];
      await settle();
      for (const waiting of gone.map(stillWaiting)) expect(await waiting).toBe(true);
      expect((await hold({ length: 100 * 1024, first: "{" }).answer).status).toBe(429);
      for (const socket of open.splice(0)) socket.destroy();
      await settle();
    }
    const res = await post(gw, "/v1/chat/completions", { model: OPENAI_MODEL, messages: [{ role: "user", content: "hi" }] });
    expect(res.status).toBe(200);
  });
});

describe("shares set too small", () => {
  test("a key's share below max_body_bytes still takes one body of the largest size, and the total one key's share", async () => {
    const small = await startGateway({ upstreamUrl: upstream.url, limits: { max_body_bytes: MAX_BODY, body_per_key_bytes: 1024, body_total_bytes: 1024 } });
    try {
      const res = await fetch(`${small.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${small.key}`, "content-type": "application/json" }, body: paddedChat(MAX_BODY) });
      expect(res.status).toBe(200);
    } finally {
      await small.stop();
    }
  });
});
