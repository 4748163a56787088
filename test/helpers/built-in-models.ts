import { defaultConfig } from "../../src/config/defaults.ts";

const BUILT_IN = defaultConfig({ OPENAI_API_KEY: "x", ANTHROPIC_API_KEY: "x" }).models;

/**
 * A model of the built-in catalogue (its prices, window and traits as shipped) served by one of
 * the fake upstream's providers, as `audit/<id>`: the bill audits charge the catalogue's own
 * pricing objects, not copies of them.
 */
export function builtInModel(id: string, provider: "fake-openai" | "fake-anthropic"): Record<string, unknown> {
  const model = BUILT_IN.find((m) => m.id === id);
  if (!model) throw new Error(`no built-in model ${id}`);
  return { ...model, id: `audit/${id}`, provider, aliases: undefined };
}
