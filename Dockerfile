# syntax=docker/dockerfile:1
# Build: one self-contained binary (Bun runtime + gateway + dependencies).
FROM oven/bun:1.4.5 AS build
WORKDIR /src
COPY package.json bun.lock ./
RUN bun install --frozen-lockfile --production
COPY tsconfig.json bunfig.toml ./
COPY src ./src
RUN bun build src/index.ts src/billing/tokenizer-worker.ts src/store/checkpoint-worker.ts src/formats/openai-embeddings/embeddings-worker.ts --compile --minify --sourcemap --outfile /out/switchyard

# Run: a slim glibc base, an unprivileged user, and a volume for the SQLite ledger.
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin switchyard \
 && mkdir -p /app/data && chown -R switchyard /app
WORKDIR /app
COPY --from=build /out/switchyard /usr/local/bin/switchyard
USER switchyard
# Nothing else is needed: the binary raises Bun's fetch limit (BUN_CONFIG_MAX_HTTP_REQUESTS) and sets its allocator (MIMALLOC_*) itself.
# SWITCHYARD_CONTAINER: no demo account by default (src/config/env.ts, demoChoice); SWITCHYARD_DEMO=1 asks for one.
ENV PORT=8080 HOST=0.0.0.0 SWITCHYARD_DB=/app/data/switchyard.sqlite SWITCHYARD_CONTAINER=1
EXPOSE 8080
VOLUME ["/app/data"]
# The binary asks its own /ready (ledger writes, Redis answers if used, not draining): no curl needed.
HEALTHCHECK --interval=15s --timeout=5s --start-period=15s --retries=3 CMD ["/usr/local/bin/switchyard", "--health-check"]
ENTRYPOINT ["/usr/local/bin/switchyard"]
