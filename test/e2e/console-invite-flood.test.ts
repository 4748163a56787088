/**
 * Made-up invite links, per client address (http/console/console-api.ts, INVITE_FAILURES_PER_MINUTE).
 * Anyone may post a link to `/console/api/invites/check` and `/invites/accept`, and each was a read
 * of the shared store with nothing to throttle it, as made-up session cookies were
 * (console-session-flood.test.ts). Past 60 links looked up in vain in a minute, the address's
 * invite requests are refused before any read; another address, and a real link from it, still work.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { ConsoleClient } from "../helpers/console-client.ts";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { startGateway, type Gateway } from "../helpers/gateway.ts";

const ADMIN = "console-invite-flood-admin-token-0123456789";
const upstream = useFakeUpstream();
let gw: Gateway;
beforeAll(async () => {
  gw = await startGateway({ upstreamUrl: upstream.url, adminToken: ADMIN });
});
afterAll(async () => {
  await gw?.stop();
});
const madeUp = () => Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64url");

test("made-up invite links from one address are 404s up to 60 a minute; past them its invite checks and accepts are 429 before any read, a real link too", async () => {
  const operator = new ConsoleClient(gw.url);
  await operator.signIn({ token: ADMIN });
  const account = await operator.json("POST", "/console/api/accounts", { name: "invited co", credits: 1 }, 201);
  const invite = await operator.json("POST", `/console/api/accounts/${account.id}/invites`, { login: "invited" }, 201);
  const token = new URL(invite.url).hash.slice(8);
  const client = new ConsoleClient(gw.url);
  // A real link checks before the flood.
  expect((await client.call("POST", "/console/api/invites/check", { token })).status).toBe(200);
  // 61 in vain: the last of them past the 60 a minute.
  for (let i = 0; i < 61; i++) {
    const res = await client.call("POST", "/console/api/invites/check", { token: madeUp() });
    expect(res.status).toBe(404);
    await res.arrayBuffer();
  }
  const refused = await client.call("POST", "/console/api/invites/check", { token: madeUp() });
  expect(refused.status).toBe(429);
  expect(refused.headers.get("retry-after")).toBe("60");
  expect(((await refused.json()) as any).error.message).toContain("Too many invite links that do not exist");
  const accept = await client.call("POST", "/console/api/invites/accept", { token: madeUp(), password: "a long enough passphrase 42" });
  expect(accept.status).toBe(429);
  // The real link too, from this address, for the minute.
  expect((await client.call("POST", "/console/api/invites/check", { token })).status).toBe(429);
});
