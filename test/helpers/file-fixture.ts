import { afterAll, beforeAll } from "bun:test";

/**
 * A fixture shared by one test file: started before its tests, stopped after them. The returned
 * object stands in for the fixture, which only exists once the hook has run, so a file can keep
 * it in a `const` and use it like the real thing.
 */
export function fileFixture<T extends object>(what: string, start: () => Promise<T>, stop: (fixture: T) => Promise<void>): T {
  let current: T | undefined;
  beforeAll(async () => {
    current = await start();
  });
  afterAll(async () => {
    if (current) await stop(current);
  });
  return new Proxy({} as T, {
    get(_, prop) {
      if (!current) throw new Error(`${what} is used before its beforeAll hook ran`);
      const value = Reflect.get(current, prop, current);
      return typeof value === "function" ? value.bind(current) : value;
    },
  });
}
