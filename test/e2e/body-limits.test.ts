/**
 * Issue 32 item 2: one body cap, enforced while reading, on every route and for every content
 * type, and authentication before any body is read (admin routes included). Each request here
 * goes over a raw socket whose body keeps coming (64 MiB against a cap of 256 KiB), so a test sees
 * how much the gateway took before it answered and whether it then closed the connection: a
 * gateway that reads (or drains) what it refused would take the whole 64 MiB.
 */
import { describe, expect, test } from "bun:test";
import { useFakeUpstream } from "../helpers/fake-upstream.ts";
import { useGateway } from "../helpers/gateway.ts";
import { rawUpload, type RawUploadResult } from "../helpers/raw-upload.ts";

const CAP = 256 * 1024;
const HUGE = 64 * 1024 * 1024;
const ADMIN_TOKEN = "admin-token-for-body-limit-tests-0123456789";

const upstream = useFakeUpstream();
const gw = useGateway(() => ({ upstreamUrl: upstream.url, adminToken: ADMIN_TOKEN, limits: { max_body_bytes: CAP } }));
const port = () => Number(new URL(gw.url).port);

interface Route {
  method: string;
  path: string;
  anthropic: boolean;
  auth: () => string;
}
const key = () => `Bearer ${gw.key}`;
const admin = () => `Bearer ${ADMIN_TOKEN}`;
const ROUTES: Route[] = [
  { method: "POST", path: "/v1/chat/completions", anthropic: false, auth: key },
  { method: "POST", path: "/v1/messages", anthropic: true, auth: key },
  { method: "POST", path: "/v1/messages/count_tokens", anthropic: true, auth: key },
  { method: "POST", path: "/v1/responses", anthropic: false, auth: key },
  { method: "POST", path: "/v1/embeddings", anthropic: false, auth: key },
  { method: "POST", path: "/v1/admin/accounts", anthropic: false, auth: admin },
  { method: "PATCH", path: "/v1/admin/keys/key_nobody", anthropic: false, auth: admin },
  { method: "POST", path: "/v1/admin/accounts/acct_nobody/credits", anthropic: false, auth: admin },
];
const CONTENT_TYPES = ["application/json", "text/plain", null, "multipart/form-data; boundary=xyz", "application/x-www-form-urlencoded"];

/** The gateway answered with one JSON error of this status and type, in the route's shape. */
function expectError(route: Route, res: RawUploadResult, status: number, openaiType: string, anthropicType: string): { message: string } {
  expect(res.status).toBe(status);
  expect(res.headers["content-type"]).toStartWith("application/json");
  expect(res.trailing).toBe(0);
  const body = JSON.parse(res.body);
  if (route.anthropic) {
    expect(body.type).toBe("error");
    expect(body.error.type).toBe(anthropicType);
  } else {
    expect(body.error.type).toBe(openaiType);
  }
  expect(typeof body.error.message).toBe("string");
  return body.error;
}

/** It answered before taking the body and closed the connection: the rest was never received. */
function expectBodyNotTaken(res: RawUploadResult) {
  expect(res.closedByServer).toBe(true);
  expect(res.sentWhenAnswered).toBeLessThan(HUGE);
  expect(res.sent).toBeLessThan(HUGE);
}

const cases = ROUTES.flatMap((route) => CONTENT_TYPES.flatMap((type) => [true, false].map((chunked) => ({ route, type, chunked }))));

describe("a body over max_body_bytes → 413 as soon as the cap is passed", () => {
  test.each(cases.map((c) => [`${c.route.method} ${c.route.path}`, c.type ?? "no content type", c.chunked ? "chunked" : "Content-Length", c] as const))(
    "%s, %s, %s",
    async (_r, _t, _f, { route, type, chunked }) => {
      const headers: Record<string, string> = { authorization: route.auth() };
      if (type) headers["content-type"] = type;
      const res = await rawUpload({ port: port(), method: route.method, path: route.path, headers, total: HUGE, chunked });
      const error = expectError(route, res, 413, "invalid_request_error", "request_too_large");
      expect(error.message).toContain(String(CAP));
      expectBodyNotTaken(res);
    },
  );
});

describe("authentication before the body is read", () => {
  test.each(ROUTES.map((r) => [`${r.method} ${r.path}`, r] as const))("%s: a 64 MiB chunked text/plain body without credentials → 401, not read", async (_name, route) => {
    const res = await rawUpload({ port: port(), method: route.method, path: route.path, headers: { "content-type": "text/plain" }, total: HUGE, chunked: true });
    expectError(route, res, 401, "authentication_error", "authentication_error");
    expectBodyNotTaken(res);
  });

  test.each(ROUTES.map((r) => [`${r.method} ${r.path}`, r] as const))("%s: a 64 MiB Content-Length without valid credentials → 401, not 413: the size limit is not told", async (_name, route) => {
    // A wrong key too, on the client routes (admin failures are few here: past 10 a minute they are 429s).
    const wrong = route.auth === key ? [{ "content-type": "application/json", authorization: "Bearer svc-sk-not-a-key-not-a-key-not-a-key-not-a-key-00" }] : [];
    for (const headers of [{ "content-type": "application/json" }, ...wrong]) {
      const res = await rawUpload({ port: port(), method: route.method, path: route.path, headers, total: HUGE, chunked: false });
      const error = expectError(route, res, 401, "authentication_error", "authentication_error");
      expect(error.message).not.toContain(String(CAP));
      expectBodyNotTaken(res);
    }
  });

  test("the issue's reproduction: POST /v1/admin/accounts with a wrong token and 60 MB chunked text/plain → 401, not read", async () => {
    const res = await rawUpload({ port: port(), path: "/v1/admin/accounts", headers: { authorization: "Bearer wrong-token-wrong-token-wrong-token-00", "content-type": "text/plain" }, total: 60_000_000, chunked: true });
    expect(res.status).toBe(401);
    expect(JSON.parse(res.body).error.message).toBe("Invalid admin token.");
    expect(res.closedByServer).toBe(true);
    expect(res.sent).toBeLessThan(60_000_000);
  });

  test("a small unauthenticated admin body is not validated first: 401, not 400", async () => {
    const res = await fetch(`${gw.url}/v1/admin/accounts`, { method: "POST", headers: { "content-type": "text/plain" }, body: "not an object" });
    expect(res.status).toBe(401);
    expect(((await res.json()) as { error: { type: string } }).error.type).toBe("authentication_error");
  });

  test("a small refused body keeps the connection (only a large or unsized one is cut)", async () => {
    const res = await rawUpload({ port: port(), path: "/v1/chat/completions", headers: { "content-type": "application/json" }, total: 1024, chunked: false, waitMs: 300 });
    expect(res.status).toBe(401);
    expect(res.headers.connection).not.toBe("close");
    expect(res.sent).toBe(1024);
  });
});

describe("bodies under the cap that are not JSON", () => {
  test.each(ROUTES.map((r) => [`${r.method} ${r.path}`, r] as const))("%s: text/plain → 400 that says the body must be JSON", async (_name, route) => {
    const res = await fetch(gw.url + route.path, { method: route.method, headers: { authorization: route.auth(), "content-type": "text/plain" }, body: '{"model":"x"}' });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { message: string } };
    expect(body.error.message).toBe("The request body must be JSON, sent with Content-Type: application/json.");
  });

  // Bun gives a request without a body no stream, and Elysia then hands the hook no content type:
  // the route's schema refuses the missing body.
  test.each([["text/plain"], ["multipart/form-data; boundary=xyz"], [null], ["application/json"]])("an empty body of type %s → the schema's 400, never a 500", async (type) => {
    const headers: Record<string, string> = { authorization: key() };
    if (type) headers["content-type"] = type;
    // With `Content-Length: 0`, as fetch sends it.
    headers["content-length"] = "0";
    const res = await fetch(`${gw.url}/v1/chat/completions`, { method: "POST", headers, body: "" });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { type: string; message: string } };
    expect(body.error.type).toBe("invalid_request_error");
    expect(body.error.message).toBe("Invalid request: body: Expected object.");
  });

  test("a JSON body exactly at the cap is read and answered", async () => {
    const head = '{"name":"at-the-cap","credits":1,"padding":"';
    const body = head + "p".repeat(CAP - head.length - 2) + '"}';
    expect(Buffer.byteLength(body)).toBe(CAP);
    const res = await fetch(`${gw.url}/v1/admin/accounts`, { method: "POST", headers: { authorization: admin(), "content-type": "application/json" }, body });
    expect(res.status).toBe(201);
  });
});
