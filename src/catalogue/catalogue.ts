import type { ModelConfig } from "../config/schema.ts";
import { creditsPerMessage } from "../billing/pricing.ts";

/**
 * The model list never changes while the process runs, so its JSON is built once and
 * every GET /v1/models answers with the same bytes.
 */
export function createCatalogue(models: ModelConfig[]) {
  const byId = new Map(models.map((m) => [m.id, m]));
  // Exact aliases resolve like ids; `prefix*` patterns are tried longest prefix first.
  const byAlias = new Map<string, ModelConfig>();
  const patterns: { prefix: string; model: ModelConfig }[] = [];
  for (const m of models) {
    for (const alias of m.aliases ?? []) {
      if (alias.endsWith("*")) patterns.push({ prefix: alias.slice(0, -1), model: m });
      else byAlias.set(alias, m);
    }
  }
  patterns.sort((a, b) => b.prefix.length - a.prefix.length);
  const resolve = (name: string): ModelConfig | undefined =>
    byId.get(name) ?? byAlias.get(name) ?? patterns.find((p) => name.startsWith(p.prefix))?.model;
  const list = {
    object: "list",
    data: models.map((m) => ({
      id: m.id,
      object: "model",
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
  // Models have no creation date of their own; a fixed one keeps Anthropic-style lists stable across restarts.
  // Exact aliases are listed too, after the ids: an Anthropic client (Claude Code's /model) lists names it can send.
  const anthropicEntry = (m: ModelConfig, id: string) => ({
    type: "model",
    id,
    display_name: m.display_name ?? m.id,
    created_at: m.created_at ?? "2025-01-01T00:00:00Z",
  });
  const anthropicEntries = [
    ...models.map((m) => anthropicEntry(m, m.id)),
    ...[...byAlias].map(([alias, m]) => anthropicEntry(m, alias)),
  ];
  const entryById = new Map(list.data.map((entry) => [entry.id, entry]));
  const anthropicById = new Map(anthropicEntries.map((entry) => [entry.id, entry]));
  return {
    /** The model a client's name means: an id, an exact alias, or the longest matching `prefix*` alias. */
    get: resolve,
    listJson: () => listJson,
    /** One model as `GET /v1/models/{id}` answers it: the list's element, in the list's shape. */
    entry: (id: string) => entryById.get(id),
    anthropicEntry: (id: string) => anthropicById.get(id),
    /** Anthropic's shape, with its cursor paging (`limit`, `after_id`, `before_id`). */
    anthropicList(query: { limit?: string; after_id?: string; before_id?: string }) {
      const limit = Math.min(1000, Math.max(1, Number.parseInt(query.limit ?? "20", 10) || 20));
      let start = 0;
      let end = anthropicEntries.length;
      if (query.after_id) start = anthropicEntries.findIndex((m) => m.id === query.after_id) + 1;
      if (query.before_id) end = Math.max(0, anthropicEntries.findIndex((m) => m.id === query.before_id));
      const page = query.before_id ? anthropicEntries.slice(Math.max(start, end - limit), end) : anthropicEntries.slice(start, Math.min(end, start + limit));
      const hasMore = query.before_id ? end - limit > start : start + limit < end;
      return { data: page, has_more: hasMore, first_id: page[0]?.id ?? null, last_id: page.at(-1)?.id ?? null };
    },
  };
}

export type Catalogue = ReturnType<typeof createCatalogue>;
