/**
 * Makes sure the benchmark's servers never outlive it, even when bench/run.ts is killed with
 * SIGKILL and cannot clean up itself. run.ts starts this once and writes to our stdin:
 *
 *   add <pid>    a child to look after        del <pid>    that child has exited
 *   exit         run.ts cleaned up by itself: leave quietly
 *
 * When stdin closes without `exit` (run.ts died), or run.ts's pid disappears, every child still
 * listed gets SIGTERM, then SIGKILL 3 s later. Only the pids we were given are ever signalled.
 */
export {};

const parent = Number(process.argv[2]);
const pids = new Set<number>();
let leaving = false;

process.on("SIGINT", () => {
  /* Ctrl-C reaches the whole process group; run.ts cleans up, we stay until it has */
});

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
};

async function reap(): Promise<never> {
  if (leaving) process.exit(0);
  leaving = true;
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGTERM");
    } catch {}
  }
  const deadline = Date.now() + 3000;
  while (Date.now() < deadline && [...pids].some(alive)) await Bun.sleep(100);
  for (const pid of pids) {
    if (!alive(pid)) continue;
    try {
      process.kill(pid, "SIGKILL");
    } catch {}
  }
  process.exit(0);
}

setInterval(() => {
  if (!alive(parent)) void reap();
}, 500);

let buffer = "";
try {
  for await (const chunk of Bun.stdin.stream()) {
    buffer += new TextDecoder().decode(chunk);
    let nl: number;
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const [cmd, arg] = buffer.slice(0, nl).trim().split(/\s+/);
      buffer = buffer.slice(nl + 1);
      if (cmd === "add") pids.add(Number(arg));
      else if (cmd === "del") pids.delete(Number(arg));
      else if (cmd === "exit") process.exit(0);
    }
  }
} catch {}
await reap();
