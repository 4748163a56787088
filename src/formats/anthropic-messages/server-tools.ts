import { GatewayError } from "../../streaming/gateway-error.ts";

/**
 * Anthropic's server tools: tools the vendor runs inside the answer (web search, web fetch, code
 * execution) and the connector fields that reach other servers from there (`mcp_servers`,
 * `container`). The spec (1.7) has tools run on the client only, and these are what the price
 * book cannot charge: a web search costs the operator a per-search fee, code execution container
 * time, and their results are prompt the hold never saw. So they never reach the vendor, on any
 * path: the translation to an OpenAI-format upstream drops them too (they have no
 * `input_schema`). Tools Anthropic defines but the client runs (`bash_…`, `text_editor_…`,
 * `computer_…`, `memory_…`) and `tool_search_tool_…` (its cost is tokens) pass as they came.
 */
const SERVER_TOOL = /^(?:web_search|web_fetch|code_execution)_/;

/** Top-level fields that only serve server-side tools. */
const SERVER_FIELDS = ["mcp_servers", "container"] as const;

type Tool = { type?: unknown; name?: unknown };

export function isServerTool(tool: unknown): boolean {
  return tool !== null && typeof tool === "object" && typeof (tool as Tool).type === "string" && SERVER_TOOL.test((tool as Tool).type as string);
}

/**
 * The body without server tools or their fields: the same object when it has none (most
 * requests, and all of Claude Code's but its WebSearch). A `tools` list left empty goes, with its
 * `tool_choice` (Anthropic refuses a choice without tools).
 */
export function withoutServerTools(body: Record<string, unknown>): Record<string, unknown> {
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
