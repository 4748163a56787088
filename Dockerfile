# syntax=docker/dockerfile:1
# Build: one self-contained binary (Bun runtime + gateway + dependencies).
FROM oven/bun:1.4.5 AS build
WORKDIR /src
COPY package.json bun.lock ./
RUN bun install --frozen-lockfile --production
COPY tsconfig.json bunfig.toml ./
COPY src ./src
RUN bun build src/index.ts src/billing/tokenizer-worker.ts src/store/checkpoint-worker.ts --compile --minify --sourcemap --outfile /out/switchyard

# Run: a slim glibc base, an unprivileged user, and a volume for the SQLite ledger.
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /app --shell /usr/sbin/nologin switchyard \
 && mkdir -p /app/data && chown -R switchyard /app
WORKDIR /app
COPY --from=build /out/switchyard /usr/local/bin/switchyard
USER switchyard
# Bun's fetch runs at most 256 upstream requests at once unless told otherwise; every open stream is one.
ENV PORT=8080 HOST=0.0.0.0 SWITCHYARD_DB=/app/data/switchyard.sqlite BUN_CONFIG_MAX_HTTP_REQUESTS=4096
EXPOSE 8080
VOLUME ["/app/data"]
ENTRYPOINT ["/usr/local/bin/switchyard"]
