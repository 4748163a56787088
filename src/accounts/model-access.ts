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

/** The models a key's list is checked against where the gateway's catalogue is at hand (the admin API, the console). */
export interface KnownModels {
  /** Every configured model id. */
  ids: readonly string[];
  /** The model id a client's name resolves to (an id, an alias), if any. */
  resolve: (name: string) => string | undefined;
}

/**
 * Why a key's list would not do what its writer meant, or null: an entry that no configured model
 * matches is a typo that leaves the key refused (a console probe saved `gpt-4o-mnii`, and every
 * request then got a 403). An exact alias is named with its model, since lists match model ids
 * after aliases resolve: an alias in the list would match nothing. The CLI, which may run without
 * the gateway's config, saves lists unchecked.
 */
export function unknownModelsError(patterns: readonly string[], known: KnownModels, field = "models"): string | null {
  const wrong: string[] = [];
  for (const p of patterns) {
    if (p.endsWith("*") ? known.ids.some((id) => id.startsWith(p.slice(0, -1))) : known.ids.includes(p)) continue;
    const target = p.endsWith("*") ? undefined : known.resolve(p);
    wrong.push(target === undefined ? `${JSON.stringify(p.slice(0, 60))} matches no configured model` : `${JSON.stringify(p.slice(0, 60))} is an alias: list its model, ${JSON.stringify(target)}`);
    if (wrong.length === 5) break;
  }
  if (wrong.length === 0) return null;
  return `${field}: ${wrong.join("; ")}. A key's list names model ids (vendor/name, as GET /v1/models lists them) or prefix* patterns.`;
}
