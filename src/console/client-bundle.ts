/**
 * Bundles the console's client at build time. Imported as a macro (console-assets.ts), so
 * `bun build --compile` runs it once and embeds the result in the binary; under `bun run` it runs
 * when console-assets.ts is first loaded. Bun.build cannot run inside a macro while the bundler
 * waits for it, so the bundle is made by a child Bun process (build-client.ts).
 */
export function clientBundle(): { js: string; css: string } {
  const run = Bun.spawnSync([process.execPath, `${import.meta.dir}/build-client.ts`], { stdout: "pipe", stderr: "pipe" });
  if (run.exitCode !== 0) throw new Error(`the console's client did not build: ${run.stderr.toString().slice(0, 2000)}`);
  return JSON.parse(run.stdout.toString()) as { js: string; css: string };
}
