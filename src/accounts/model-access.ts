/**
 * Which models a client key may use (issue 33): a key may carry a list of model ids and
 * `prefix*` patterns (`["anthropic/*", "openai/gpt-4.1-mini"]`); null means every model. The
 * check is made on the model a name resolves to, after aliases, so an alias cannot reach a model
 * the key may not use, and a key limited to a model reaches it through any of its aliases. Pure.
 */

/** True when `modelId` is one the patterns name: an exact id, or one starting with a `prefix*`'s prefix. */
export function modelAllowed(patterns: readonly string[] | null, modelId: string): boolean {
  if (patterns === null) return true;
  for (const p of patterns) {
    if (p.endsWith("*") ? modelId.startsWith(p.slice(0, -1)) : modelId === p) return true;
  }
  return false;
}

/**
 * The 403's words: the model refused and the ones the key may use, so the client knows what to ask
 * for instead. `model: <id>` as Anthropic words it: Claude Code reads a 403 `permission_error` as
 * model access only when its message has `model:` in it, and then moves to its fallback model; any
 * other 403 on a custom base URL ended its run as "Failed to authenticate" (an agents probe).
 */
export function modelRefusal(patterns: readonly string[], modelId: string): string {
  return `This API key may not use model: ${modelId.slice(0, 200)} (it is limited to ${patterns.join(", ")}). GET /v1/models lists the models it may use.`;
}

/** The key's list as stored (JSON text, null for every model). */
export function modelsColumn(models: readonly string[] | null | undefined): string | null {
  return models === null || models === undefined ? null : JSON.stringify(models);
}

/**
 * A stored list read back. A value that is not a list of strings (never written by the gateway)
 * reads as an empty list: the key then reaches no model, rather than every one.
 */
export function readModelsColumn(text: string | null | undefined): string[] | null {
  if (text === null || text === undefined) return null;
  try {
    const parsed: unknown = JSON.parse(text);
    return Array.isArray(parsed) && parsed.every((p) => typeof p === "string") ? parsed : [];
  } catch {
    return [];
  }
}
