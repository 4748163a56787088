import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";

/** Every TypeScript file under `dir`, at any depth (the source-tree checks read them all). */
export function typeScriptFiles(dir: string): string[] {
  const files: string[] = [];
  const walk = (at: string) => {
    for (const name of readdirSync(at)) {
      const path = join(at, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (path.endsWith(".ts")) files.push(path);
    }
  };
  walk(dir);
  return files;
}
