export {};
/**
 * The floor: the least a Bun proxy can do — take the request, fetch the upstream, stream the
 * body back. No auth, no parsing, no accounting. The gateway is measured against this.
 */
const upstream = process.env.UPSTREAM!;
const server = Bun.serve({
  port: Number(process.env.PORT ?? 0),
  hostname: "127.0.0.1",
  idleTimeout: 0,
  async fetch(req) {
    const url = new URL(req.url);
    const res = await fetch(upstream + url.pathname, {
      method: req.method,
      headers: { "content-type": "application/json" },
      body: req.body ? await req.arrayBuffer() : undefined,
      signal: req.signal,
    });
    return new Response(res.body, { status: res.status, headers: { "content-type": res.headers.get("content-type") ?? "application/json" } });
  },
});
console.log(`READY ${server.port}`);
