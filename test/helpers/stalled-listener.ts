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
  stop(): Promise<void>;
}

export async function stalledListener(): Promise<StalledListener> {
  const child = Bun.spawn([process.execPath, "-e", `const s = require("node:net").createServer(() => {}).listen({ port: 0, host: "127.0.0.1" }, () => console.log(s.address().port));`], { stdout: "pipe", stderr: "ignore" });
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
  const stop = async () => {
    child.kill("SIGKILL");
    for (const s of fillers) s.terminate();
    await child.exited;
  };
  // Connects complete (the kernel queues them) until the queue is full; the first that does not is left pending.
  for (let i = 0; i < 4096; i++) {
    const pending = Bun.connect({ hostname: "127.0.0.1", port, socket: { data() {}, error() {} } });
    const opened = await Promise.race([pending, Bun.sleep(200).then(() => undefined)]);
    if (!opened) {
      pending.then((s) => s.terminate(), () => {});
      return { url: `http://127.0.0.1:${port}`, port, stop };
    }
    fillers.push(opened);
  }
  await stop();
  throw new Error("the listener's accept queue never filled");
}
