import { afterAll, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { loadSettings } from "../../src/config/load-config.ts";
import { processRole, readEnvironment, storeChoice } from "../../src/config/env.ts";
import { startFakeUpstream } from "../helpers/fake-upstream.ts";
import { startGateway } from "../helpers/gateway.ts";

/**
 * deploy/docker-compose.yml cannot be run here (no Docker): its structure is checked instead —
 * two gateway replicas with workers on the shared PostgreSQL and Redis, started only once those
 * are healthy, each health-checked on /ready — and its health check command is run against a
 * real gateway, ready and draining.
 */

const ROOT = resolve(import.meta.dir, "../..");
const DEPLOY = join(ROOT, "deploy");
const compose = Bun.YAML.parse(readFileSync(join(DEPLOY, "docker-compose.yml"), "utf8")) as {
  services: Record<string, Service>;
  volumes?: Record<string, unknown>;
};

interface Service {
  image?: string;
  build?: { context: string; dockerfile: string };
  environment?: Record<string, string>;
  depends_on?: Record<string, { condition: string }>;
  healthcheck?: { test: string[]; interval?: string; retries?: number };
  ports?: string[];
  command?: string[];
  volumes?: string[];
}

const gateways = Object.entries(compose.services).filter(([, s]) => s.build || s.image === "switchyard:local");
/**
 * A value as Compose expands it: `${VAR:-default}` with nothing set, and `${VAR:?why}` (required,
 * no default) as an operator's .env would fill it in.
 */
const expand = (value: string) =>
  value.replace(/\$\{(\w+):-([^}]*)\}/g, (_, _name, fallback) => fallback).replace(/\$\{(\w+):\?[^}]*\}/g, (_, name) => `operator-${name}-0123456789abcdef0123456789`);
const composeText = readFileSync(join(DEPLOY, "docker-compose.yml"), "utf8");
const SECRETS = ["POSTGRES_PASSWORD", "REDIS_PASSWORD", "SWITCHYARD_ADMIN_TOKEN", "SWITCHYARD_METRICS_TOKEN"];

test("compose takes its secrets from deploy/.env with no defaults (it refuses to start without one, naming it); Redis has a password; /metrics a token; ports on 127.0.0.1", () => {
  for (const name of SECRETS) {
    const uses = [...composeText.matchAll(new RegExp(`\\$\\{${name}([^}]*)\\}`, "g"))].map((m) => m[1]!);
    expect(uses.length).toBeGreaterThan(0);
    // Every use is `:?message naming it`: Compose stops with that message when it is unset or empty.
    for (const use of uses) expect(use).toMatch(new RegExp(`^:\\?.*${name}`));
  }
  const { redis } = compose.services;
  const command = redis!.command!.map(expand);
  expect(command[command.indexOf("--requirepass") + 1]).toBe(expand("${REDIS_PASSWORD:?x}"));
  for (const [, gw] of gateways) {
    const env = Object.fromEntries(Object.entries(gw.environment!).map(([k, v]) => [k, expand(String(v))]));
    expect(new URL(env.SWITCHYARD_REDIS_URL!).password).toBe(expand("${REDIS_PASSWORD:?x}"));
    expect(env.SWITCHYARD_METRICS_TOKEN!.length).toBeGreaterThanOrEqual(32);
    expect(env.SWITCHYARD_ADMIN_TOKEN!.length).toBeGreaterThanOrEqual(32);
    for (const p of gw.ports!) expect(expand(p).startsWith("127.0.0.1:")).toBe(true);
  }
  const example = readFileSync(join(DEPLOY, ".env.example"), "utf8");
  for (const name of SECRETS) expect(example).toMatch(new RegExp(`^${name}=$`, "m"));
});

test("two gateway replicas, built from the repository's Dockerfile, each running workers on the shared PostgreSQL and Redis", () => {
  expect(gateways.map(([name]) => name).sort()).toEqual(["gateway-a", "gateway-b"]);
  const hostPorts = new Set<string>();
  for (const [, gw] of gateways) {
    expect(existsSync(join(DEPLOY, gw.build!.context, gw.build!.dockerfile))).toBe(true);
    const env = Object.fromEntries(Object.entries(gw.environment!).map(([k, v]) => [k, expand(String(v))]));
    expect(Number(env.SWITCHYARD_WORKERS)).toBeGreaterThanOrEqual(2);
    expect(new URL(env.SWITCHYARD_DATABASE_URL!).hostname).toBe("postgres");
    expect(new URL(env.SWITCHYARD_REDIS_URL!).hostname).toBe("redis");
    // What the gateway itself would decide from this environment: a supervisor of workers, not a refusal.
    expect(processRole(env, storeChoice(env))).toEqual({ kind: "supervisor", workers: Number(env.SWITCHYARD_WORKERS) });
    expect(() => loadSettings(env)).not.toThrow();
    // Each replica start would otherwise issue a demo key, revoking the other replica's.
    expect(env.SWITCHYARD_DEMO).toBe("0");
    for (const p of gw.ports!) hostPorts.add(expand(p).split(":").at(-2)!);
  }
  expect(hostPorts.size).toBe(gateways.length);
});

test("gateways start only once PostgreSQL and Redis are healthy; every service has a health check; the database has a volume", () => {
  const { postgres, redis } = compose.services;
  expect(postgres!.image).toMatch(/^postgres:/);
  expect(redis!.image).toMatch(/^redis:/);
  expect(postgres!.healthcheck!.test.join(" ")).toContain("pg_isready");
  expect(redis!.healthcheck!.test.join(" ")).toContain("ping");
  const gatewayEnv = gateways[0]![1].environment!;
  const db = new URL(expand(gatewayEnv.SWITCHYARD_DATABASE_URL!));
  expect(expand(postgres!.environment!.POSTGRES_DB!)).toBe(db.pathname.slice(1));
  expect(expand(postgres!.environment!.POSTGRES_USER!)).toBe(db.username);
  expect(expand(postgres!.environment!.POSTGRES_PASSWORD!)).toBe(db.password);
  expect(postgres!.volumes!.some((v) => v.endsWith(":/var/lib/postgresql/data"))).toBe(true);
  expect(Object.keys(compose.volumes ?? {})).toContain(postgres!.volumes![0]!.split(":")[0]!);
  for (const [, gw] of gateways) {
    expect(gw.depends_on).toEqual({ postgres: { condition: "service_healthy" }, redis: { condition: "service_healthy" } });
    expect(gw.healthcheck!.test.join(" ")).toContain("/ready");
  }
});

const upstream = await startFakeUpstream();
const gw = await startGateway({ upstreamUrl: upstream.url });
afterAll(async () => {
  await gw.stop();
  await upstream.stop();
});

test("the gateways' health check command passes on a ready gateway and fails once it drains", async () => {
  const [kind, ...command] = gateways[0]![1].healthcheck!.test;
  expect(kind).toBe("CMD");
  const port = new URL(gw.url).port;
  // The container listens on 8080; here the gateway is on a random port.
  // The gateway runs in this process: the command must not block it (spawn, not spawnSync).
  const run = () => Bun.spawn(command.map((part) => part.replace("/127.0.0.1/8080", `/127.0.0.1/${port}`)), { timeout: 5_000 }).exited;
  expect(await run()).toBe(0);
  gw.app.services.drain();
  expect((await fetch(`${gw.url}/ready`)).status).toBe(503);
  expect(await run()).not.toBe(0);
});

test("the README's single-container run gives Docker's stop the grace plus 10 s, a volume for the ledger, and the first account through the admin API; .dockerignore keeps secrets, ledgers and installs out of the build", () => {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  const start = readme.indexOf("### Docker: one container on SQLite");
  expect(start).toBeGreaterThan(-1);
  const section = readme.slice(start, readme.indexOf("\n### ", start + 1));
  const run = section.slice(section.indexOf("docker run"), section.indexOf("\n", section.indexOf(" switchyard\n", section.indexOf("docker run"))));
  // Docker's own stop waits 10 s, a third of the default grace: answers were cut and charges left for the spill file.
  const grace = readEnvironment({}).shutdownGraceMs / 1000;
  expect(Number(/--stop-timeout (\d+)/.exec(run)?.[1])).toBeGreaterThanOrEqual(grace + 10);
  expect(run).toContain(":/app/data");
  expect(section).toContain("10001");
  expect(section).toContain("/v1/admin/accounts");
  expect(section).toContain(".backup");
  const ignored = readFileSync(join(ROOT, ".dockerignore"), "utf8").split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));
  for (const entry of ["node_modules", "data", ".git", "bench/results", "deploy/.env", "*.sqlite"]) expect(ignored).toContain(entry);
  // What the Dockerfile copies stays in the context.
  const copied = [...readFileSync(join(ROOT, "Dockerfile"), "utf8").matchAll(/^COPY (?!--from)(.+) \S+$/gm)].flatMap((m) => m[1]!.split(/\s+/));
  expect(copied).toContain("src");
  for (const path of copied) expect([path, ignored.some((entry) => new Bun.Glob(entry).match(path) || path.startsWith(`${entry}/`))]).toEqual([path, false]);
});
