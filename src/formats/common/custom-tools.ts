import type { Json } from "./wire-types.ts";

/*
 * Custom (free-form) tools, OpenAI's: a tool that takes raw text, held to a grammar or not
 * (Codex's `apply_patch`, code mode's `exec`). Only OpenAI's own APIs take them as they are; every
 * other upstream gets a function taking one string, `input`, told the grammar in words, and the
 * model's call comes back through the event union as a call of `{"input": …}`, which the client's
 * encoder unwraps for a client that offered a custom tool of that name (the Responses API's,
 * encode-responses.ts; chat completions', encode-openai.ts).
 */

/** The one argument every custom tool takes upstream. */
export const CUSTOM_PARAMETERS: Json = {
  type: "object",
  properties: { input: { type: "string", description: "The tool's whole input, as raw text." } },
  required: ["input"],
  additionalProperties: false,
};

/**
 * The upstream cannot be held to a grammar, so the model is told it in words. `format` in either
 * API's shape: the Responses API's (`{type: "grammar", syntax, definition}`) or chat's (the same
 * inside `grammar`).
 */
export function customToolDescription(description: string, format: unknown): string {
  const outer = format as { type?: unknown; syntax?: unknown; definition?: unknown; grammar?: { syntax?: unknown; definition?: unknown } } | undefined;
  const f = outer?.type === "grammar" && outer.grammar && typeof outer.grammar === "object" ? { type: "grammar", ...outer.grammar } : outer;
  let how = "Call this tool with one argument, `input`: the raw text the tool takes (not JSON-encoded inside it).";
  if (f?.type === "grammar" && typeof f.definition === "string") {
    how += ` \`input\` must match this ${typeof f.syntax === "string" ? f.syntax : ""} grammar:\n${f.definition}`;
  }
  return description ? `${description}\n\n${how}` : how;
}

/**
 * What the model put in a custom tool's one argument. Models do not always obey: a bare JSON
 * string, or text that is not JSON at all, is taken as the input itself. A call cut short
 * (`cut`) gives what its `{"input":"…` had reached, not the JSON around it.
 */
export function customInput(args: string, cut = false): string {
  try {
    const value = JSON.parse(args);
    if (value && typeof value === "object" && typeof value.input === "string") return value.input;
    if (typeof value === "string") return value;
  } catch {
    if (cut && /^\s*\{\s*"input"\s*:\s*"/.test(args)) {
      // The string so far, closed: as it is, or without an escape the cut left unfinished (`\`, `\u00`).
      // Cut after its closing quote, the object only lacks its brace.
      for (const closed of [`${args.trimEnd()}}`, `${args}"}`, `${args.replace(/\\u[0-9a-fA-F]{0,3}$/, "")}"}`, `${args.replace(/\\$/, "")}"}`]) {
        try {
          const value = JSON.parse(closed);
          if (typeof value.input === "string") return value.input;
        } catch {}
      }
    }
  }
  return args;
}
