import type { Json } from "../common/wire-types.ts";

/*
 * Tools Anthropic defines and the client runs (`bash_…`, `text_editor_…`, `memory_…`) come with
 * no `input_schema`: Anthropic's models know them by type. Another vendor's model does not, so on
 * the way to an OpenAI-format upstream each becomes a function of the same name taking the input
 * Anthropic documents for it; the calls come back as `tool_use` blocks the client runs as it
 * would Claude's. Before, they were dropped without a word, and a `tool_choice` naming one was
 * ignored (an Anthropic SDK probe, thirty-fourth session). `computer_…` is not offered: its
 * results are screenshots, which a tool result cannot carry to another vendor.
 */

const str = (description: string): Json => ({ type: "string", description });
const int = (description: string): Json => ({ type: "integer", description });
const range: Json = { type: "array", items: { type: "integer" }, minItems: 2, maxItems: 2, description: "[first, last] line to show, 1-based; last -1 for the end of the file." };

const BASH: Json = {
  description: "Run a command in a persistent bash shell on the user's machine; its output is returned. restart: true starts a fresh shell.",
  parameters: {
    type: "object",
    properties: { command: str("The command to run."), restart: { type: "boolean", description: "Restart the shell instead of running a command." } },
  },
};

/** Anthropic's text editor: `view`, `create`, `str_replace`, `insert` (and `undo_edit` in its older versions). */
function textEditor(type: string): Json {
  const commands = /_(?:20241022|20250124)$/.test(type) ? ["view", "create", "str_replace", "insert", "undo_edit"] : ["view", "create", "str_replace", "insert"];
  return {
    description: "View, create and edit text files on the user's machine. view shows a file with line numbers, or a directory's entries; str_replace replaces old_str, which must occur exactly once, with new_str; insert adds text after line insert_line (0 for the start).",
    parameters: {
      type: "object",
      properties: {
        command: { type: "string", enum: commands },
        path: str("Absolute path of the file or directory."),
        file_text: str("create: the new file's content."),
        old_str: str("str_replace: the exact text to replace."),
        new_str: str("str_replace: the text that replaces it; insert (older versions): the text to insert."),
        insert_line: int("insert: the line after which to insert."),
        insert_text: str("insert: the text to insert."),
        view_range: range,
      },
      required: ["command", "path"],
    },
  };
}

const MEMORY: Json = {
  description: "Your memory directory (/memories), kept across conversations: view, create, str_replace, insert, delete and rename files in it. Check it before starting a task.",
  parameters: {
    type: "object",
    properties: {
      command: { type: "string", enum: ["view", "create", "str_replace", "insert", "delete", "rename"] },
      path: str("Path of the file or directory under /memories."),
      file_text: str("create: the file's content."),
      old_str: str("str_replace: the exact text to replace."),
      new_str: str("str_replace: the text that replaces it."),
      insert_line: int("insert: the line after which to insert."),
      insert_text: str("insert: the text to insert."),
      view_range: range,
      old_path: str("rename: the current path."),
      new_path: str("rename: the new path."),
    },
    required: ["command"],
  },
};

/**
 * The function an Anthropic-defined client tool is offered as to an OpenAI-format upstream
 * (`{name, description, parameters}`), or undefined for a tool that cannot be offered there.
 */
export function clientToolAsFunction(tool: { type?: unknown; name?: unknown }): { name: string; description: string; parameters: Json } | undefined {
  const type = typeof tool.type === "string" ? tool.type : "";
  const name = typeof tool.name === "string" && tool.name ? tool.name : undefined;
  if (!name) return undefined;
  const spec = /^bash_\d{8}$/.test(type) ? BASH : /^text_editor_\d{8}$/.test(type) ? textEditor(type) : /^memory_\d{8}$/.test(type) ? MEMORY : undefined;
  return spec && { name, description: spec.description as string, parameters: spec.parameters as Json };
}
