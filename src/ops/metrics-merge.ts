/**
 * The expositions of several worker processes (SWITCHYARD_WORKERS) as one. Workers share a port,
 * so a scrape reaches whichever one the kernel hands the connection: each answered with its own
 * counters, and a scraper saw `switchyard_requests_total` jump between workers' values (counter
 * resets every other scrape, rates meaningless). The worker that is scraped now answers for all:
 * every worker's samples, labelled `worker="N"` (its slot, stable across its restarts), each
 * family's samples together under one HELP and TYPE, as the text format requires. Sum them with
 * `sum without (worker) (...)`.
 *
 * Pure: text in, text out. The samples are our own exposition's (ops/metrics.ts), so a line is a
 * comment (`# HELP name …`, `# TYPE name …`) or `name{labels} value` / `name value`.
 */
export interface WorkerExposition {
  worker: number;
  text: string;
}

export function mergeExpositions(parts: readonly WorkerExposition[]): string {
  const families = new Map<string, { head: string[]; samples: string[] }>();
  for (const part of parts) {
    let family: { head: string[]; samples: string[] } | undefined;
    /** Whether this part is the one whose HELP and TYPE the family shows (the first to have it). */
    let headed = false;
    for (const line of part.text.split("\n")) {
      if (line === "") continue;
      if (line.startsWith("#")) {
        const name = line.split(" ", 3)[2] ?? "";
        let found = families.get(name);
        if (!found) families.set(name, (found = { head: [], samples: [] }));
        if (found !== family) headed = found.head.length === 0;
        family = found;
        if (headed) family.head.push(line);
        continue;
      }
      if (!family) {
        // A sample before any header: kept under a family of its own.
        family = families.get("") ?? { head: [], samples: [] };
        families.set("", family);
      }
      family.samples.push(withWorker(line, part.worker));
    }
  }
  let out = "";
  for (const { head, samples } of families.values()) {
    for (const line of head) out += line + "\n";
    for (const line of samples) out += line + "\n";
  }
  return out;
}

/** `name{a="b"} 1` → `name{worker="3",a="b"} 1`; `name 1` → `name{worker="3"} 1`. */
export function withWorker(line: string, worker: number): string {
  const label = `worker="${worker}"`;
  const space = line.indexOf(" ");
  const brace = line.indexOf("{");
  if (brace !== -1 && (space === -1 || brace < space)) {
    const empty = line[brace + 1] === "}";
    return `${line.slice(0, brace + 1)}${label}${empty ? "" : ","}${line.slice(brace + 1)}`;
  }
  return space === -1 ? `${line}{${label}}` : `${line.slice(0, space)}{${label}}${line.slice(space)}`;
}
