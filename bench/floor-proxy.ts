/**
 * The floor: the least a Bun proxy can do. `Bun.serve` takes the request, `fetch` sends it to
 * the upstream (same path and query, same headers less the hop-by-hop ones), and the upstream's
 * Response is handed back as it is, so its body streams through untouched. No auth, no JSON
 * parsing, no accounting: a gateway written in Bun cannot go under this.
 *
 *   UPSTREAM=http://127.0.0.1:PORT [PORT=0] bun bench/floor-proxy.ts      (or --upstream URL --port N)
 *
 * Listens on 127.0.0.1 only and prints `READY <port>` once listening. A client that goes away
 * cancels the body stream, and with it the upstream fetch.
 */
import { parseArgs, serveAsChild } from "./child-process.ts";

const args = parseArgs();
const upstream = (args.get("upstream") ?? process.env.UPSTREAM ?? "").replace(/\/+$/, "");
if (!/^http:\/\/(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?$/.test(upstream)) {
  console.error("floor-proxy: UPSTREAM must be a loopback http://127.0.0.1:PORT address");
  process.exit(2);
}

const server = Bun.serve({
  port: Number(args.get("port") ?? process.env.PORT ?? 0),
  hostname: "127.0.0.1",
  idleTimeout: 0,
  async fetch(req) {
    const url = req.url;
    const path = url.slice(url.indexOf("/", url.indexOf("//") + 2));
    const headers = new Headers(req.headers);
    headers.delete("host");
    headers.delete("connection");
    headers.delete("content-length");
    return fetch(upstream + path, {
      method: req.method,
      headers,
      body: req.method === "GET" || req.method === "HEAD" ? undefined : await req.arrayBuffer(),
      redirect: "manual",
      // A pass-through hands bytes on as they came.
      decompress: false,
    } as RequestInit);
  },
});

serveAsChild(server, args.get("exit-on-stdin-eof") === "1");
