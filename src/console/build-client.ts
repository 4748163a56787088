import { readFileSync } from "node:fs";

/**
 * Bundles client/main.ts (TypeScript and uPlot from node_modules; nothing from a CDN) with
 * Bun.build for browsers, and prints `{js, css}` as JSON for client-bundle.ts.
 */
const result = await Bun.build({ entrypoints: [`${import.meta.dir}/client/main.ts`], target: "browser", minify: true, format: "iife" });
if (!result.success) {
  for (const message of result.logs) console.error(message);
  process.exit(1);
}
const js = await result.outputs.find((o) => o.kind === "entry-point")!.text();
const uplotCss = readFileSync(Bun.resolveSync("uplot/dist/uPlot.min.css", import.meta.dir), "utf8");
const css = uplotCss + "\n" + readFileSync(`${import.meta.dir}/client/console.css`, "utf8");
process.stdout.write(JSON.stringify({ js, css }));
