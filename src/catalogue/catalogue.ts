import type { ModelConfig } from "../config/schema.ts";
import { creditsPerMessage } from "../billing/pricing.ts";

/**
 * The model list never changes while the process runs, so its JSON is built once and
 * every GET /v1/models answers with the same bytes.
 */
export function createCatalogue(models: ModelConfig[]) {
  const byId = new Map(models.map((m) => [m.id, m]));
  const list = {
    object: "list",
    data: models.map((m) => ({
      id: m.id,
      object: "model",
      owned_by: m.owned_by ?? m.id.slice(0, m.id.indexOf("/")),
      credits_per_msg: m.category === "free" ? 0 : creditsPerMessage(m.pricing),
      model_id: m.id,
      category: m.category,
      context_length: m.context_length,
      modalities: m.modalities ?? { input: ["text"], output: [m.category === "image" ? "image" : "text"] },
    })),
  };
  const listJson = JSON.stringify(list);
  return {
    get: (id: string) => byId.get(id),
    listJson: () => listJson,
  };
}

export type Catalogue = ReturnType<typeof createCatalogue>;
