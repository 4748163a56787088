import { expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const SRC = resolve(import.meta.dir, "../src");

/** Every relative import and re-export of every TypeScript file under src/, types included. */
function importGraph(): Map<string, string[]> {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (path.endsWith(".ts")) files.push(path);
    }
  };
  walk(SRC);
  const graph = new Map<string, string[]>();
  const specifier = /(?:^|[\s;])(?:import|export)\s[^;]*?\sfrom\s+["'](\.{1,2}\/[^"']+)["']|(?:^|[\s;])import\s+["'](\.{1,2}\/[^"']+)["']/g;
  for (const file of files) {
    const text = readFileSync(file, "utf8");
    const deps = [...text.matchAll(specifier)].map((m) => resolve(dirname(file), m[1] ?? m[2]!));
    graph.set(file, deps);
  }
  return graph;
}

/** Each cycle once, as the path around it (depth-first search, back edges). */
function cycles(graph: Map<string, string[]>): string[][] {
  const state = new Map<string, "open" | "done">();
  const stack: string[] = [];
  const found: string[][] = [];
  const visit = (file: string) => {
    state.set(file, "open");
    stack.push(file);
    for (const dep of graph.get(file) ?? []) {
      if (state.get(dep) === "open") found.push([...stack.slice(stack.indexOf(dep)), dep]);
      else if (!state.has(dep)) visit(dep);
    }
    stack.pop();
    state.set(file, "done");
  };
  for (const file of graph.keys()) if (!state.has(file)) visit(file);
  return found;
}

test("src/ has no import circle (type imports included): each arrow points down the floors", () => {
  const graph = importGraph();
  expect(graph.size).toBeGreaterThan(50);
  const found = cycles(graph).map((c) => c.map((f) => relative(SRC, f)).join(" → "));
  expect(found).toEqual([]);
});

test("the circle check sees a circle when there is one", () => {
  const a = join(SRC, "a.ts");
  const b = join(SRC, "b.ts");
  const c = join(SRC, "c.ts");
  expect(cycles(new Map([[a, [b]], [b, [c]], [c, [a]]]))).toEqual([[a, b, c, a]]);
  expect(cycles(new Map([[a, [b]], [b, [c]], [c, []]]))).toEqual([]);
});
