import type { Subprocess } from "bun";
import { join } from "node:path";

export interface GatewayProcess {
  child: Subprocess<"ignore", "pipe", "pipe">;
  url: string;
  /** The demo key the process printed (a new one at each start). */
  key: string;
  banner: string;
  /** What the process wrote to stderr so far (its JSON log lines). */
  stderr(): string;
}

const ROOT = join(import.meta.dir, "..", "..");

/**
 * The real entry point (`bun src/index.ts`) as a child process on a loopback port; resolves with
 * its URL and the printed demo key once it serves (SWITCHYARD_DEMO=1 unless `env` says otherwise:
 * an admin token or a database URL would turn the demo account off). Both pipes are read to the end in the
 * background, so a chatty process never blocks on a full pipe.
 */
export async function startGatewayProcess(env: Record<string, string>, options: { openFiles?: number } = {}): Promise<GatewayProcess> {
  // A lower open-file limit (soft and hard: Bun raises the soft one to the hard one) through the shell's ulimit; exec keeps signals going to bun.
  const command = options.openFiles === undefined ? ["bun", "src/index.ts"] : ["bash", "-c", `ulimit -n ${options.openFiles} && exec bun src/index.ts`];
  const child = Bun.spawn(command, {
    cwd: ROOT,
    env: { ...process.env, PORT: "0", HOST: "127.0.0.1", LOG_LEVEL: "warn", SWITCHYARD_DEMO: "1", ...env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  let errors = "";
  void (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of child.stderr) errors += decoder.decode(chunk, { stream: true });
  })().catch(() => {});
  const reader = child.stdout.getReader();
  const decoder = new TextDecoder();
  let text = "";
  // A process that never prints its banner is killed, which ends the read below.
  let timedOut = false;
  const deadline = setTimeout(() => {
    timedOut = true;
    child.kill("SIGKILL");
  }, 15_000);
  try {
    while (!/svc-sk-[A-Za-z0-9_-]+/.test(text) || !text.includes("curl")) {
      const { value, done } = await reader.read();
      if (done) {
        await child.exited;
        throw new Error(`gateway ${timedOut ? "did not start within 15 s" : `exited (${child.exitCode})`}: ${text}${errors}`);
      }
      text += decoder.decode(value, { stream: true });
    }
  } finally {
    clearTimeout(deadline);
  }
  void (async () => {
    for (;;) {
      const { done } = await reader.read();
      if (done) return;
    }
  })().catch(() => {});
  return {
    child,
    url: text.match(/listening on (http:\/\/\S+)/)![1]!,
    key: text.match(/svc-sk-[A-Za-z0-9_-]+/)![0],
    banner: text,
    stderr: () => errors,
  };
}

/** Stops a gateway process as an operator would (SIGTERM: it drains and exits), and waits for it; nothing when there is none. */
export async function stopGatewayProcess(gateway: GatewayProcess | undefined): Promise<void> {
  if (!gateway) return;
  gateway.child.kill("SIGTERM");
  await gateway.child.exited;
}

/** Kills (SIGKILL) those of `children` still running and waits for all of them: a test file's clean-up. */
export async function killGatewayProcesses(children: GatewayProcess[]): Promise<void> {
  for (const gw of children) if (gw.child.exitCode === null && gw.child.signalCode === null) gw.child.kill("SIGKILL");
  await Promise.all(children.map((gw) => gw.child.exited));
}

/** `bun src/cli/admin.ts <args>` against the same files; resolves with its exit code and output. */
export async function runAdminCli(args: string[], env: Record<string, string>): Promise<{ code: number; out: string }> {
  const child = Bun.spawn(["bun", "src/cli/admin.ts", ...args], { cwd: ROOT, env: { ...process.env, ...env }, stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, out: out + err };
}

/**
 * `bun src/index.ts` for a start that is expected to fail: resolves with its exit code and output
 * once it exits; killed (and reported so) if it is still running after `timeoutMs`.
 */
export async function runGatewayToExit(env: Record<string, string>, timeoutMs = 15_000, options: { unprivileged?: boolean } = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  // As a user file permissions apply to: root reads and writes whatever they say, so as root the
  // process runs as nobody (util-linux's setpriv, in every Debian and Ubuntu).
  const asNobody = options.unprivileged && process.getuid?.() === 0 ? ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] : [];
  const child = Bun.spawn([...asNobody, "bun", "src/index.ts"], {
    cwd: ROOT,
    env: { ...process.env, PORT: "0", HOST: "127.0.0.1", LOG_LEVEL: "warn", ...env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const deadline = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
  try {
    const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
    return { code, stdout, stderr };
  } finally {
    clearTimeout(deadline);
  }
}
