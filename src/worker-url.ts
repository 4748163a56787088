/**
 * The URL of a worker thread's entry point, from its path under `src/`. Run from source, this
 * module sits in `src/`; in a compiled binary every bundled module's `import.meta.url` is the
 * executable's, and the worker entry points (package.json's build, the Dockerfile) keep their
 * paths under `src/`. Resolved against this module, one relative path serves both.
 */
export function workerUrl(pathUnderSrc: string): URL {
  return new URL(`./${pathUnderSrc}`, import.meta.url);
}
