import type { Server } from "bun";

/** `--name value` pairs, the form every bench helper takes. */
export function parseArgs(argv = process.argv.slice(2)): Map<string, string> {
  const args = new Map<string, string>();
  for (let i = 0; i < argv.length; i += 2) args.set(argv[i]!.replace(/^--/, ""), argv[i + 1] ?? "");
  return args;
}

/**
 * How a helper server lives under the bench: it prints `READY <port>` for the parent to read,
 * stops on SIGINT/SIGTERM and, with `exitOnStdinEof`, when its stdin closes. The parent holds
 * that stdin open, so the helper goes with it whatever ends the parent (exit, crash, SIGKILL).
 */
export function serveAsChild(server: Server<unknown>, exitOnStdinEof: boolean): void {
  console.log(`READY ${server.port}`);
  const stop = () => {
    server.stop(true);
    process.exit(0);
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
  if (!exitOnStdinEof) return;
  (async () => {
    try {
      for await (const _ of Bun.stdin.stream()) {
        /* nothing is sent; wait for EOF */
      }
    } catch {}
    stop();
  })();
}

/** The port a helper started with `serveAsChild` prints (`READY <port>`), read from its stdout. */
export async function readyPort(stdout: ReadableStream<Uint8Array>, what = "the helper"): Promise<number> {
  const reader = stdout.getReader();
  let text = "";
  while (!/READY (\d+)/.test(text)) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`${what} did not start: ${text}`);
    text += new TextDecoder().decode(value);
  }
  reader.releaseLock();
  return Number(/READY (\d+)/.exec(text)![1]);
}
