import type { Socket } from "bun";

/**
 * A loopback port whose connects never complete, as a host behind a firewall that drops SYNs: a
 * listener in a stopped child process whose accept queue is full, so the kernel drops every
 * further SYN and a connect waits until its own retries run out (about two minutes on Linux).
 * Filling the queue takes a few hundred loopback connects (Bun's listen backlog is 511, whatever
 * `backlog` says), held here until `stop`.
 */
export interface StalledListener {
  url: string;
  port: number;
  /**
   * The outage ends: the listener's process runs again and takes the queued connects, and every
   * connect after that completes at once (one still waiting completes at its next SYN
   * retransmission). With `answer`, it answers every request with it, and this resolves once the
   * queue is empty (every filler answered): a SYN that comes while the process is still taking the
   * queue is dropped like any other.
   */
  recover(): Promise<void>;
  stop(): Promise<void>;
}

export interface StalledListenerOptions {
  /** Once recovered, every request gets a 200 with this JSON body (an HTTP server, not a bare listener). */
  answer?: unknown;
}

export async function stalledListener(options: StalledListenerOptions = {}): Promise<StalledListener> {
  const script =
    options.answer === undefined
      ? `const s = require("node:net").createServer(() => {}).listen({ port: 0, host: "127.0.0.1" }, () => console.log(s.address().port));`
      : `const s = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response(process.env.ANSWER, { headers: { "content-type": "application/json" } }) }); console.log(s.port);`;
  const env = { ...process.env, ANSWER: JSON.stringify(options.answer ?? null) };
  const child = Bun.spawn([process.execPath, "-e", script], { stdout: "pipe", stderr: "ignore", env });
  const reader = child.stdout.getReader();
  let line = "";
  while (!line.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error("the listener's process ended before it listened");
    line += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  const port = Number(line.trim());
  process.kill(child.pid, "SIGSTOP");
  const fillers: Socket[] = [];
  // With an HTTP server behind, each filler asks for something: its answer says it was taken off the queue.
  const ask = options.answer !== undefined;
  let unanswered = 0;
  let drained: (() => void) | undefined;
  const answered = () => {
    if (--unanswered === 0) drained?.();
  };
  const recover = async () => {
    const empty = ask && unanswered > 0 ? new Promise<void>((resolve) => (drained = resolve)) : undefined;
    process.kill(child.pid, "SIGCONT");
    if (empty) await Promise.race([empty, Bun.sleep(10_000)]);
  };
  const stop = async () => {
    child.kill("SIGKILL");
    for (const s of fillers) s.terminate();
    await child.exited;
  };
  // Connects complete (the kernel queues them) until the queue is full; the first that does not is left pending.
  for (let i = 0; i < 4096; i++) {
    let heard = false;
    const pending = Bun.connect({
      hostname: "127.0.0.1",
      port,
      socket: {
        open: (socket) => void (ask && socket.write("GET / HTTP/1.1\r\nhost: filler\r\n\r\n")),
        data() {
          if (heard) return;
          heard = true;
          answered();
        },
        error() {},
      },
    });
    const opened = await Promise.race([pending, Bun.sleep(200).then(() => undefined)]);
    if (opened && ask) unanswered++;
    if (!opened) {
      pending.then((s) => s.terminate(), () => {});
      return { url: `http://127.0.0.1:${port}`, port, recover, stop };
    }
    fillers.push(opened);
  }
  await stop();
  throw new Error("the listener's accept queue never filled");
}
