import { expect, test } from "bun:test";
import { typeScriptFiles } from "../helpers/source-files.ts";
import { readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const SRC = resolve(import.meta.dir, "../../src");

/** Every relative import and re-export of every TypeScript file under src/, types included. */
function importGraph(): Map<string, string[]> {
  const files = typeScriptFiles(SRC);
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

/**
 * The room a file under src/ lives in: its top folder (`gateway`, `store`), or for a file at the
 * top its own name (`app`, `index`). Paths outside src/ (package.json) are no room.
 */
function roomOf(path: string): string | undefined {
  const rel = relative(SRC, path);
  if (rel.startsWith("..")) return undefined;
  const [first, ...rest] = rel.split("/");
  return rest.length === 0 ? first!.replace(/\.ts$/, "") : first;
}

/** The graph with rooms as nodes: an arrow from a room to another when any file of one imports a file of the other. */
function roomGraph(files: Map<string, string[]>): Map<string, string[]> {
  const rooms = new Map<string, Set<string>>();
  for (const [file, deps] of files) {
    const from = roomOf(file)!;
    if (!rooms.has(from)) rooms.set(from, new Set());
    for (const dep of deps) {
      const to = roomOf(dep);
      if (to !== undefined && to !== from) rooms.get(from)!.add(to);
    }
  }
  return new Map([...rooms].map(([room, deps]) => [room, [...deps].sort()]));
}

/** Pairs of rooms that import each other, each pair once ("a ↔ b"). */
function mutualPairs(rooms: Map<string, string[]>): string[] {
  const pairs: string[] = [];
  for (const [a, deps] of rooms) for (const b of deps) if (a < b && rooms.get(b)?.includes(a)) pairs.push(`${a} ↔ ${b}`);
  return pairs.sort();
}

/** Arrows (file → file, relative to src/) that break a rule: `forbidden(importer, imported)` says which. */
function arrowsWhere(files: Map<string, string[]>, forbidden: (from: string, to: string) => boolean): string[] {
  const found: string[] = [];
  for (const [file, deps] of files) {
    for (const dep of deps) {
      const from = relative(SRC, file);
      const to = relative(SRC, dep);
      if (!to.startsWith("..") && forbidden(from, to)) found.push(`${from} → ${to}`);
    }
  }
  return found.sort();
}

/** Client formats sit below the upstreams, the HTTP layer and the stores. */
const FORMAT_ROOMS = ["formats"];
const BELOW_FORMATS_FORBIDDEN = ["providers", "http", "store"];
const formatReachesUp = (from: string, to: string) =>
  FORMAT_ROOMS.includes(from.split("/")[0]!) && BELOW_FORMATS_FORBIDDEN.includes(to.split("/")[0]!);

/** Only the composition roots know which store implementation runs; every other room sees ports. */
const COMPOSITION_ROOTS = (from: string) => from === "app.ts" || from === "index.ts" || from.startsWith("cli/");
const reachesStore = (from: string, to: string) => to.startsWith("store/") && !from.startsWith("store/") && !COMPOSITION_ROOTS(from);

/** The HTTP layer is the top floor: only app.ts mounts it. */
const reachesHttp = (from: string, to: string) => to.startsWith("http/") && !from.startsWith("http/") && from !== "app.ts";

/** The simulated upstream sits behind the transport, where app.ts puts it. */
const reachesSimulated = (from: string, to: string) =>
  to.startsWith("providers/simulated/") && !from.startsWith("providers/simulated/") && from !== "app.ts";

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

test("with folders as nodes, src/ has no circle: no room imports a room that imports it, directly or around", () => {
  const rooms = roomGraph(importGraph());
  expect(rooms.has("gateway")).toBe(true);
  expect(rooms.has("http")).toBe(true);
  expect(mutualPairs(rooms)).toEqual([]);
  const found = cycles(rooms).map((c) => c.join(" → "));
  expect(found).toEqual([]);
});

test("the room check sees two rooms that import each other, and a circle through four", () => {
  const f = (path: string) => join(SRC, path);
  const files = new Map([
    [f("gateway/forward.ts"), [f("providers/provider.ts")]],
    [f("providers/provider.ts"), [f("gateway/deadline.ts"), f("log/log.ts")]],
    [f("log/log.ts"), [f("app.ts")]],
    [f("app.ts"), [f("gateway/forward.ts")]],
    [f("gateway/deadline.ts"), []],
  ]);
  const rooms = roomGraph(files);
  expect(rooms.get("providers")).toEqual(["gateway", "log"]);
  expect(mutualPairs(rooms)).toEqual(["gateway ↔ providers"]);
  expect(cycles(rooms).map((c) => c.join(" → "))).toEqual(["gateway → providers → gateway", "gateway → providers → log → app → gateway"]);
});

test("client formats never import providers/, http/ or store/", () => {
  expect(arrowsWhere(importGraph(), formatReachesUp)).toEqual([]);
});

test("only app.ts, index.ts and cli/ import store implementations", () => {
  expect(arrowsWhere(importGraph(), reachesStore)).toEqual([]);
});

test("nothing but app.ts imports http/, and only app.ts wires the simulated upstream", () => {
  const graph = importGraph();
  expect(arrowsWhere(graph, reachesHttp)).toEqual([]);
  expect(arrowsWhere(graph, reachesSimulated)).toEqual([]);
});

test("the arrow rules catch the arrows they forbid", () => {
  const f = (path: string) => join(SRC, path);
  const files = new Map([
    [f("formats/prepare-upstream.ts"), [f("providers/provider.ts"), f("config/schema.ts")]],
    [f("formats/openai-chat/schema.ts"), [f("store/ids.ts"), f("http/routes/chat-completions.ts")]],
    [f("gateway/forward.ts"), [f("store/sqlite/sqlite-ledger.ts"), f("http/plugins/errors.ts"), f("providers/simulated/simulated-upstream.ts")]],
    [f("cli/admin.ts"), [f("store/database.ts")]],
    [f("app.ts"), [f("store/stores.ts"), f("http/routes/admin.ts"), f("providers/simulated/simulated-upstream.ts")]],
    [f("store/stores.ts"), [f("store/sqlite/sqlite-ledger.ts")]],
  ]);
  expect(arrowsWhere(files, formatReachesUp)).toEqual([
    "formats/openai-chat/schema.ts → http/routes/chat-completions.ts",
    "formats/openai-chat/schema.ts → store/ids.ts",
    "formats/prepare-upstream.ts → providers/provider.ts",
  ]);
  expect(arrowsWhere(files, reachesStore)).toEqual(["formats/openai-chat/schema.ts → store/ids.ts", "gateway/forward.ts → store/sqlite/sqlite-ledger.ts"]);
  expect(arrowsWhere(files, reachesHttp)).toEqual(["formats/openai-chat/schema.ts → http/routes/chat-completions.ts", "gateway/forward.ts → http/plugins/errors.ts"]);
  expect(arrowsWhere(files, reachesSimulated)).toEqual(["gateway/forward.ts → providers/simulated/simulated-upstream.ts"]);
});
