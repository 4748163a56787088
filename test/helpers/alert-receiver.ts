import { expect } from "bun:test";

export interface ReceivedAlert {
  body: string;
  json: any;
  headers: Headers;
}

/**
 * A webhook receiver on loopback: records what it accepts (2xx), answers 503 while `refuse` is
 * set, and can go down and come back on the same port (connections refused meanwhile).
 */
export function startAlertReceiver() {
  const accepted: ReceivedAlert[] = [];
  let refused = 0;
  let refuse = false;
  const handler = async (req: Request) => {
    const body = await req.text();
    if (refuse) {
      refused++;
      return new Response("unavailable", { status: 503 });
    }
    accepted.push({ body, json: JSON.parse(body), headers: req.headers });
    return new Response(null, { status: 204 });
  };
  let server: ReturnType<typeof Bun.serve> | undefined = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: handler });
  const port = server.port;
  return {
    url: `http://127.0.0.1:${port}/hooks/switchyard`,
    accepted,
    refusedCount: () => refused,
    setRefusing(on: boolean) {
      refuse = on;
    },
    /** Stops listening: deliveries meet a refused connection. */
    async down() {
      await server?.stop(true);
      server = undefined;
    },
    up() {
      server ??= Bun.serve({ port, hostname: "127.0.0.1", fetch: handler });
    },
    types: () => accepted.map((a) => `${a.json.type}${a.json.data.threshold !== undefined && a.json.type !== "balance.low" ? `:${a.json.data.scope}:${a.json.data.threshold}` : ""}`),
    async stop() {
      await server?.stop(true);
    },
  };
}

/** Polls until `done()` holds (fails the test after `ms`). */
export async function waitFor(what: string, done: () => boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!done()) {
    if (Date.now() > deadline) expect(`${what} within ${ms} ms`).toBe("done");
    await Bun.sleep(10);
  }
}
