import { expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";

/**
 * docs/api.md renders as written: a closing fence with text after it ("``` The") left the rest of
 * the file inside a code block, eight sections shown as code, and a paragraph inside a table split
 * it in two. Links into it from the README land on a heading.
 */

const ROOT = join(import.meta.dir, "..", "..", "..");
const API = readFileSync(join(ROOT, "docs/api.md"), "utf8");
const README = readFileSync(join(ROOT, "README.md"), "utf8");

/** Fences that do not pair up: `line: text` for each bad one, plus one for a block left open. */
function fenceProblems(markdown: string): string[] {
  const problems: string[] = [];
  let openedAt: number | undefined;
  markdown.split("\n").forEach((line, i) => {
    if (!line.trimStart().startsWith("```")) return;
    if (openedAt === undefined) {
      if (/^```[\w+-]*$/.test(line)) openedAt = i + 1;
      else problems.push(`${i + 1}: an opening fence is \`\`\` or \`\`\`lang alone: ${line}`);
    } else if (line === "```") openedAt = undefined;
    else problems.push(`${i + 1}: a closing fence is \`\`\` alone: ${line}`);
  });
  if (openedAt !== undefined) problems.push(`${openedAt}: this code block is never closed`);
  return problems;
}

/** GitHub's anchors for a file's headings (outside code blocks): lower case, punctuation gone, spaces as hyphens, repeats numbered. */
function headingAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let inCode = false;
  for (const line of markdown.split("\n")) {
    // As GitHub reads fences: only ``` alone closes a block (so "``` The" left the rest of the file in one).
    if (inCode ? line.trimEnd() === "```" : line.startsWith("```")) inCode = !inCode;
    const heading = !inCode && /^#{1,6}\s+(.*)$/.exec(line);
    if (!heading) continue;
    const slug = heading[1]!.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-");
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    anchors.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return anchors;
}

test("docs/api.md's code fences pair up: ``` or ```lang opens, ``` alone closes", () => {
  expect(fenceProblems(API)).toEqual([]);
});

test("the checks see a fence with text after it, a block left open, and GitHub's anchors", () => {
  expect(fenceProblems("```json\n{}\n``` The\nrest\n")).toEqual(["3: a closing fence is ``` alone: ``` The", "1: this code block is never closed"]);
  expect(fenceProblems("```sh\nx\n```\n")).toEqual([]);
  expect([...headingAnchors("## `GET /v1/admin/usage`: usage reports\n```\n# not a heading\n```\n### Limits per account\n### Limits per account\n")]).toEqual([
    "get-v1adminusage-usage-reports",
    "limits-per-account",
    "limits-per-account-1",
  ]);
});

test("every #anchor the README links to in docs/api.md, and every one docs/api.md links to in itself, is a heading there", () => {
  const anchors = headingAnchors(API);
  const fromReadme = [...README.matchAll(/\]\((?:\.\/)?docs\/api\.md#([^)\s]+)\)/g)].map((m) => m[1]!);
  const fromItself = [...API.matchAll(/\]\(#([^)\s]+)\)/g)].map((m) => m[1]!);
  expect(fromReadme.length).toBeGreaterThan(3);
  expect(fromReadme.filter((a) => !anchors.has(a))).toEqual([]);
  expect(fromItself.filter((a) => !anchors.has(a))).toEqual([]);
});

test("the Authentication table is one table: no paragraph between its rows", () => {
  const section = API.slice(API.indexOf("### Authentication"), API.indexOf("### Request ids"));
  const rows = section.split("\n").filter((l) => l.startsWith("|"));
  const firstRow = section.split("\n").findIndex((l) => l.startsWith("|"));
  expect(section.split("\n").slice(firstRow, firstRow + rows.length)).toEqual(rows);
  expect(rows.some((r) => r.includes("/metrics"))).toBe(true);
});
