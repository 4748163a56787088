/**
 * Seeded random mutations of valid request bodies, for the fuzz tests of the endpoints: the same
 * seed gives the same bodies on every run, so a failure can be replayed.
 */
export function seededMutations(seed: number, garbage: unknown[], maxDepth: number) {
  const random = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
  const pick = <T>(xs: T[]) => xs[Math.floor(random() * xs.length)]!;
  /** A copy of `value` with a field deleted, replaced by garbage, or mutated further down. */
  const mutate = (value: any, depth = 0): any => {
    if (value === null || typeof value !== "object" || depth > maxDepth || random() < 0.3) return random() < 0.5 ? pick(garbage) : value;
    const copy: any = Array.isArray(value) ? [...value] : { ...value };
    const keys = Object.keys(copy);
    if (keys.length === 0) return copy;
    const key = pick(keys);
    const action = random();
    if (action < 0.25) delete copy[key];
    else if (action < 0.5) copy[key] = pick(garbage);
    else copy[key] = mutate(copy[key], depth + 1);
    return copy;
  };
  return { random, pick, mutate };
}
