import type { ModelConfig } from "../config/schema.ts";
import { creditsPerMessage } from "../billing/pricing.ts";
import { modelAllowed } from "../accounts/model-access.ts";

/** Lists kept for keys limited to models, by their pattern list; past this many the cache starts again. */
const MAX_CACHED_VIEWS = 1_000;

/** The configured models by id and alias, and the lists `GET /v1/models` answers with. */
export function createCatalogue(models: ModelConfig[]) {
  const byId = new Map(models.map((m) => [m.id, m]));
  // Exact aliases resolve like ids; `prefix*` patterns are tried longest prefix first.
  const byAlias = new Map<string, ModelConfig>();
  const prefixes: { prefix: string; model: ModelConfig }[] = [];
  for (const m of models) {
    for (const alias of m.aliases ?? []) {
      if (alias.endsWith("*")) prefixes.push({ prefix: alias.slice(0, -1), model: m });
      else byAlias.set(alias, m);
    }
  }
  prefixes.sort((a, b) => b.prefix.length - a.prefix.length);
  const resolve = (name: string): ModelConfig | undefined =>
    byId.get(name) ?? byAlias.get(name) ?? prefixes.find((p) => name.startsWith(p.prefix))?.model;
  // The full list is one view; a key limited to models gets a view of its own, built once per pattern list.
  const full = catalogueView(models, byAlias, prefixes);
  const views = new Map<string, CatalogueView>();
  return {
    /** The model a client's name means: an id, an exact alias, or the longest matching `prefix*` alias. */
    get: resolve,
    listJson: full.listJson,
    /** One model as `GET /v1/models/{id}` answers it: the list's element, in the list's shape. */
    entry: full.entry,
    anthropicEntry: full.anthropicEntry,
    /** Anthropic's shape, with its cursor paging (`limit`, `after_id`, `before_id`). */
    anthropicList: full.anthropicList,
    /**
     * What a key sees: the models its list allows (accounts/model-access.ts), and the exact aliases
     * of those models; null (no list) sees everything. A model it may not use is not in its lists
     * and its `/v1/models/{id}` is a 404, as for a model that does not exist.
     */
    visibleTo(patterns: readonly string[] | null): CatalogueView {
      if (patterns === null) return full;
      const cacheKey = JSON.stringify(patterns);
      let view = views.get(cacheKey);
      if (!view) {
        if (views.size >= MAX_CACHED_VIEWS) views.clear();
        view = catalogueView(models.filter((m) => modelAllowed(patterns, m.id)), byAlias, prefixes);
        views.set(cacheKey, view);
      }
      return view;
    },
  };
}

/** Models have no creation date of their own unless configured; a fixed one keeps lists stable across restarts. */
const MODEL_CREATED_AT = "2025-01-01T00:00:00Z";

/**
 * The model lists of `shown` in both shapes. The list never changes while the process runs, so its
 * JSON is built once and every GET /v1/models answers with the same bytes.
 */
function catalogueView(shown: ModelConfig[], byAlias: Map<string, ModelConfig>, prefixes: readonly { prefix: string; model: ModelConfig }[]) {
  const list = {
    object: "list",
    data: shown.map((m) => ({
      id: m.id,
      object: "model",
      // OpenAI's model objects carry it (its SDK's type requires it); the same date as the Anthropic list's.
      created: Math.floor((Date.parse(m.created_at ?? "") || Date.parse(MODEL_CREATED_AT)) / 1000),
      owned_by: m.owned_by ?? m.id.slice(0, m.id.indexOf("/")),
      // An image model's typical message makes one image, priced apart from its tokens.
      credits_per_msg: m.category === "free" ? 0 : creditsPerMessage(m.pricing, m.category === "embedding" ? 0 : undefined, m.category === "image" ? 1 : 0),
      model_id: m.id,
      category: m.category,
      context_length: m.context_length,
      modalities: m.modalities ?? { input: ["text"], output: [m.category === "image" || m.category === "embedding" ? m.category : "text"] },
    })),
  };
  const listJson = JSON.stringify(list);
  const shownSet = new Set(shown);
  // Models have no creation date of their own; a fixed one keeps Anthropic-style lists stable across restarts.
  // Exact aliases are listed too, after the ids: an Anthropic client (Claude Code's /model) lists names it can send.
  const anthropicEntry = (m: ModelConfig, id: string) => ({
    type: "model",
    id,
    display_name: m.display_name ?? m.id,
    created_at: m.created_at ?? MODEL_CREATED_AT,
  });
  const anthropicEntries = [
    ...shown.map((m) => anthropicEntry(m, m.id)),
    ...[...byAlias].filter(([, m]) => shownSet.has(m)).map(([alias, m]) => anthropicEntry(m, alias)),
  ];
  const entryById = new Map(list.data.map((entry) => [entry.id, entry]));
  const anthropicById = new Map(anthropicEntries.map((entry) => [entry.id, entry]));
  /**
   * The model an alias names, exact or `prefix*` (longest prefix first, as a chat resolves it),
   * when this view shows it: `models.retrieve("claude-sonnet-4-5-20250929")` finds the model a
   * chat with that name uses (an SDK probe: a `claude-*` alias routed the chat, retrieval was a 404).
   */
  const aliased = (id: string): ModelConfig | undefined => {
    const model = byAlias.get(id) ?? prefixes.find((p) => id.startsWith(p.prefix))?.model;
    return model && shownSet.has(model) ? model : undefined;
  };
  return {
    listJson: () => listJson,
    // An alias is retrieved as the model it names, under the name asked for (`model_id` stays the model's own).
    entry: (id: string) => {
      const own = entryById.get(id);
      if (own) return own;
      const model = aliased(id);
      const target = model && entryById.get(model.id);
      return target ? { ...target, id } : undefined;
    },
    anthropicEntry: (id: string) => {
      const own = anthropicById.get(id);
      if (own) return own;
      const model = aliased(id);
      return model && anthropicEntry(model, id);
    },
    anthropicList(query: { limit?: string; after_id?: string; before_id?: string }) {
      const limit = Math.min(1000, Math.max(1, Number.parseInt(query.limit ?? "20", 10) || 20));
      let start = 0;
      let end = anthropicEntries.length;
      // A cursor that names no model of the list is an empty last page, either way (an unknown
      // after_id had started the list over, so a client paging on could loop).
      if (query.after_id) start = anthropicEntries.findIndex((m) => m.id === query.after_id) + 1 || anthropicEntries.length;
      if (query.before_id) end = Math.max(0, anthropicEntries.findIndex((m) => m.id === query.before_id));
      const page = query.before_id ? anthropicEntries.slice(Math.max(start, end - limit), end) : anthropicEntries.slice(start, Math.min(end, start + limit));
      const hasMore = query.before_id ? end - limit > start : start + limit < end;
      return { data: page, has_more: hasMore, first_id: page[0]?.id ?? null, last_id: page.at(-1)?.id ?? null };
    },
  };
}

export type CatalogueView = ReturnType<typeof catalogueView>;
export type Catalogue = ReturnType<typeof createCatalogue>;
