import { GatewayError } from "../../streaming/gateway-error.ts";

/*
 * Anthropic's server tools: tools the vendor runs inside the answer (web search, web fetch, code
 * execution, the advisor) and the connector fields that reach other servers from there
 * (`mcp_servers`, `container`). The spec (1.7) has tools run on the client only, and these are
 * what the price book cannot charge: a web search costs the operator a per-search fee, code
 * execution container time, and their results are prompt the hold never saw. So they never reach
 * the vendor, on any path: the translation to an OpenAI-format upstream drops them too (they have
 * no `input_schema`). Tools Anthropic defines but the client runs (`bash_…`, `text_editor_…`,
 * `computer_…`, `memory_…`) and `tool_search_tool_…` (its cost is tokens) pass as they came.
 */

/**
 * The tools that pass: the client's own (no type, or `custom`) and those Anthropic defines for
 * the client to run, whose cost is the prompt tokens they add. Every other type is a tool the
 * vendor runs itself and bills outside the answer's usage: not a deny-list of the ones known
 * today, since the advisor tool (an Opus call per use over the whole transcript, reported in
 * `usage.iterations`) slipped through one and was billed at 9.5 % (a hostile-tenant probe).
 */
const CLIENT_TOOL = /^(?:custom|(?:bash|text_editor|computer|memory)_\d{8}|tool_search_tool_[a-z0-9]+_\d{8})$/;

/** Top-level fields that only serve server-side tools, or run vendor-side model calls (compaction). */
const SERVER_FIELDS = ["mcp_servers", "container", "compaction"] as const;

type Tool = { type?: unknown; name?: unknown };

export function isServerTool(tool: unknown): boolean {
  if (tool === null || typeof tool !== "object") return false;
  const type = (tool as Tool).type;
  return type !== undefined && type !== null && !(typeof type === "string" && CLIENT_TOOL.test(type));
}

/**
 * `context_management` edits that run a model call of the vendor's own (`compact_…`: it reads the
 * whole prompt and writes a summary, billed in `usage.iterations`, outside the answer's counts;
 * charged 5.3 % of the vendor's bill, the same probe). Edits that only take from the prompt
 * (`clear_tool_uses_…`) pass.
 */
const isCompaction = (edit: unknown) => edit !== null && typeof edit === "object" && typeof (edit as { type?: unknown }).type === "string" && ((edit as { type: string }).type).startsWith("compact");

function withoutCompaction(body: Record<string, unknown>): Record<string, unknown> {
  const management = body.context_management as { edits?: unknown } | undefined;
  if (!management || typeof management !== "object" || !Array.isArray(management.edits) || !management.edits.some(isCompaction)) return body;
  const edits = management.edits.filter((edit) => !isCompaction(edit));
  const out = { ...body };
  if (edits.length > 0) out.context_management = { ...management, edits };
  else delete out.context_management;
  return out;
}

/**
 * The body without server tools or their fields: the same object when it has none (most
 * requests, and all of Claude Code's but its WebSearch). A `tools` list left empty goes, with its
 * `tool_choice` (Anthropic refuses a choice without tools).
 */
export function withoutServerTools(given: Record<string, unknown>): Record<string, unknown> {
  const body = withoutCompaction(given);
  const tools = body.tools;
  const dropTools = Array.isArray(tools) && tools.some(isServerTool);
  if (!dropTools && !SERVER_FIELDS.some((field) => body[field] !== undefined)) return body;
  const out = { ...body };
  for (const field of SERVER_FIELDS) delete out[field];
  if (dropTools) {
    const kept = (tools as unknown[]).filter((tool) => !isServerTool(tool));
    if (kept.length > 0) out.tools = kept;
    else {
      delete out.tools;
      delete out.tool_choice;
    }
  }
  return out;
}

/**
 * A request that forces a server tool (`tool_choice: {type: "tool", name: "web_search"}`) asks
 * for what no path here runs: a 400 that says so, rather than an answer that silently did not
 * search (or the vendor's 400 about a tool the client did send).
 */
export function refuseForcedServerTool(body: Record<string, unknown>): void {
  const choice = body.tool_choice as { type?: unknown; name?: unknown } | undefined;
  if (!choice || typeof choice !== "object" || choice.type !== "tool" || !Array.isArray(body.tools)) return;
  const named = (body.tools as Tool[]).filter((tool) => tool && tool.name === choice.name);
  if (named.length === 0 || !named.every(isServerTool)) return;
  throw new GatewayError(400, "invalid_request",
    `tool_choice: "${String(choice.name)}" is a server tool (${String(named[0]!.type)}), which this gateway does not run: tools run on the client. Send a tool with an input_schema, or no tool_choice.`);
}
