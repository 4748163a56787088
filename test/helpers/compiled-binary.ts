import { mkdirSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "../..");
const PREFIX = "switchyard-compiled-";
let built: Promise<string> | undefined;

/**
 * The gateway compiled by `bun run build`'s own command (package.json), with the binary written to
 * a temporary folder instead of dist/; its path. Compiled once per `bun test` run: binary.test.ts
 * and workers.test.ts both run it, and each compile bundles ~550 modules and writes a ~115 MB file
 * (2–4 s here). The files of one run share their modules (bun test runs them in one process), so
 * the second file is given the first one's binary.
 *
 * No hook runs when the whole run ends (a file's afterAll would remove it before the next file,
 * and bun test fires no "exit" event), so the folder is named by the run's process id and each
 * run removes the folders of runs whose process is gone.
 */
export function compiledBinary(): Promise<string> {
  built ??= (async () => {
    removeFinishedRuns();
    const dir = join(tmpdir(), `${PREFIX}${process.pid}`);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir);
    const script: string = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).scripts.build;
    const out = join(dir, "switchyard");
    const args = script.replace(/^bun /, "").replace(/--outfile \S+/, `--outfile ${out}`).split(/\s+/);
    const proc = Bun.spawn(["bun", ...args], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
    const [code, err] = await Promise.all([proc.exited, new Response(proc.stderr).text()]);
    if (code !== 0) throw new Error(`build failed: ${err}`);
    return out;
  })();
  return built;
}

function removeFinishedRuns(): void {
  for (const name of readdirSync(tmpdir())) {
    const pid = name.startsWith(PREFIX) ? Number(name.slice(PREFIX.length)) : NaN;
    if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid) continue;
    try {
      process.kill(pid, 0);
    } catch (err) {
      if ((err as { code?: string }).code === "ESRCH") rmSync(join(tmpdir(), name), { recursive: true, force: true });
    }
  }
}
