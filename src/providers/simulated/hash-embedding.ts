/** Dimensions of the simulated embedding model when a request names none. */
export const HASH_EMBEDDING_DIMENSIONS = 256;
/** The most it makes; more is refused with a 400, as OpenAI refuses `dimensions` past a model's size. */
export const HASH_EMBEDDING_MAX_DIMENSIONS = 3072;

/** FNV-1a, 32 bits: a fixed, fast hash, so the same word lands in the same place on every run. */
function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/**
 * A deterministic embedding for the quick start's `switchyard/embed`: each lower-cased word (or
 * token id) adds ±1 at a place hashed from it, and the vector is scaled to length 1. Texts that
 * share words point the same way, so similarity searches behave plausibly with no model behind
 * them. Values are float32, as a real model's are.
 */
export function hashEmbedding(input: string | number[], dimensions = HASH_EMBEDDING_DIMENSIONS): Float32Array {
  const vector = new Float64Array(dimensions);
  const features = typeof input === "string" ? input.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [] : input.map(String);
  for (const feature of features) {
    const h = fnv1a(feature);
    vector[h % dimensions]! += h & 0x80000000 ? -1 : 1;
  }
  let norm = 0;
  for (const x of vector) norm += x * x;
  // Nothing to hash (only punctuation): a fixed unit vector rather than zeros, which have no direction.
  if (norm === 0) vector[0] = norm = 1;
  const scale = 1 / Math.sqrt(norm);
  return Float32Array.from(vector, (x) => x * scale);
}
