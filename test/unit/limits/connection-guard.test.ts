import { describe, expect, test } from "bun:test";
import { createConnectionGuard } from "../../../src/limits/connection-guard.ts";
import { readOpenFiles, readOpenFilesLimit, watchOpenFiles } from "../../../src/ops/open-files.ts";
import { openSync, closeSync } from "node:fs";

const WINDOW = 19_000;

describe("connection guard", () => {
  test("tracks nothing below a quarter of the limit; arms from it and disarms below 15 %, forgetting what it tracked", () => {
    const guard = createConnectionGuard({ perAddress: 1, windowMs: WINDOW, limit: 1000 });
    expect(guard.observe(249)).toBe(false);
    expect(guard.armed).toBe(false);
    guard.observe(250);
    expect(guard.armed).toBe(true);
    expect(guard.arrive("10.0.0.1", 1, 0)).toBe(false);
    expect(guard.arrive("10.0.0.1", 2, 0)).toBe(true);
    // Between the marks it stays armed.
    guard.observe(160);
    expect(guard.armed).toBe(true);
    guard.observe(149);
    expect(guard.armed).toBe(false);
    // Armed again, the address starts from nothing: its old connection was forgotten.
    guard.observe(300);
    expect(guard.arrive("10.0.0.1", 2, 1)).toBe(false);
    expect(guard.counts.closedOverAddressCap).toBe(1);
  });

  test("an address keeps perAddress connections: one more is closed after its answer; a known connection's requests are not; other addresses count apart", () => {
    const guard = createConnectionGuard({ perAddress: 3, windowMs: WINDOW, limit: 100 });
    guard.observe(50);
    for (const port of [1, 2, 3]) expect(guard.arrive("10.0.0.1", port, 0)).toBe(false);
    expect(guard.arrive("10.0.0.1", 4, 10)).toBe(true);
    // Not tracked: its next request (if the client ignored the close) is judged again.
    expect(guard.arrive("10.0.0.1", 4, 11)).toBe(true);
    for (const port of [1, 2, 3]) expect(guard.arrive("10.0.0.1", port, 20)).toBe(false);
    expect(guard.arrive("10.0.0.2", 4, 20)).toBe(false);
    expect(guard.counts.closedOverAddressCap).toBe(2);
  });

  test("an IPv6 /64 counts as one address, and an IPv4-mapped address as its IPv4 one", () => {
    const guard = createConnectionGuard({ perAddress: 2, windowMs: WINDOW, limit: 100 });
    guard.observe(50);
    expect(guard.arrive("2001:db8:1:2::1", 1, 0)).toBe(false);
    expect(guard.arrive("2001:db8:1:2::ffff", 1, 0)).toBe(false);
    expect(guard.arrive("2001:db8:1:2:aaaa::9", 1, 0)).toBe(true);
    expect(guard.arrive("2001:db8:1:3::1", 1, 0)).toBe(false);
    expect(guard.arrive("::ffff:10.0.0.9", 5, 0)).toBe(false);
    expect(guard.arrive("10.0.0.9", 6, 0)).toBe(false);
    expect(guard.arrive("10.0.0.9", 7, 0)).toBe(true);
  });

  test("a connection not seen for the window no longer counts (it was closed as idle); one seen again is refreshed", () => {
    const guard = createConnectionGuard({ perAddress: 2, windowMs: WINDOW, limit: 100 });
    guard.observe(50);
    guard.arrive("10.0.0.1", 1, 0);
    guard.arrive("10.0.0.1", 2, 0);
    guard.arrive("10.0.0.1", 2, 10_000);
    expect(guard.arrive("10.0.0.1", 3, WINDOW - 1)).toBe(true);
    // Port 1 expired, port 2 (seen at 10 s) has not.
    expect(guard.arrive("10.0.0.1", 3, WINDOW + 1_000)).toBe(false);
    expect(guard.arrive("10.0.0.1", 4, WINDOW + 1_000)).toBe(true);
  });

  test("at 80 % of the limit every answer closes its connection and idle ones are to be closed; below 60 % it ends", () => {
    const guard = createConnectionGuard({ perAddress: 100, windowMs: WINDOW, limit: 1000 });
    guard.observe(300);
    expect(guard.arrive("10.0.0.1", 1, 0)).toBe(false);
    expect(guard.observe(800)).toBe(true);
    expect(guard.arrive("10.0.0.1", 1, 1)).toBe(true);
    expect(guard.arrive("10.0.0.2", 1, 1)).toBe(true);
    expect(guard.observe(700)).toBe(true);
    guard.shed(40);
    expect(guard.observe(599)).toBe(false);
    expect(guard.arrive("10.0.0.1", 1, 2)).toBe(false);
    expect(guard.counts).toMatchObject({ closedUnderPressure: 2, closedIdle: 40, pressureEpisodes: 1, open: 599, limit: 1000 });
  });

  test("connections closed by the pressure leave their address's slots: after it the address keeps perAddress new ones", () => {
    const guard = createConnectionGuard({ perAddress: 2, windowMs: WINDOW, limit: 1000 });
    guard.observe(300);
    expect(guard.arrive("10.0.0.1", 1, 0)).toBe(false);
    expect(guard.arrive("10.0.0.1", 2, 0)).toBe(false);
    expect(guard.observe(850)).toBe(true);
    guard.shed(2);
    expect(guard.observe(400)).toBe(false);
    // Ports 1 and 2 were closed; the reconnects take their places well within the window.
    expect(guard.arrive("10.0.0.1", 3, 1_000)).toBe(false);
    expect(guard.arrive("10.0.0.1", 4, 1_000)).toBe(false);
    expect(guard.arrive("10.0.0.1", 5, 1_000)).toBe(true);
    expect(guard.counts.closedOverAddressCap).toBe(1);
  });

  test("no cap per address (0): only the pressure closes; no limit known: never armed", () => {
    const uncapped = createConnectionGuard({ perAddress: 0, windowMs: WINDOW, limit: 100 });
    uncapped.observe(50);
    for (let port = 0; port < 1000; port++) expect(uncapped.arrive("10.0.0.1", port, 0)).toBe(false);
    const unknown = createConnectionGuard({ perAddress: 1, windowMs: WINDOW, limit: undefined });
    expect(unknown.observe(1_000_000)).toBe(false);
    expect(unknown.armed).toBe(false);
  });
});

describe("open files", () => {
  test("the count follows descriptors opened and closed, and the limit is this process's", () => {
    const before = readOpenFiles();
    expect(before).toBeGreaterThan(2);
    const fds = Array.from({ length: 50 }, () => openSync("/dev/null", "r"));
    expect(readOpenFiles()).toBe(before! + 50);
    for (const fd of fds) closeSync(fd);
    expect(readOpenFiles()).toBe(before!);
    expect(readOpenFilesLimit()).toBeGreaterThanOrEqual(before! + 50);
  });

  test("the watchdog closes idle connections while the guard says so, warns once, and says when it is over", async () => {
    const guard = createConnectionGuard({ perAddress: 10, windowMs: WINDOW, limit: 100 });
    const readings = [10, 90, 95, 50];
    const lines: string[] = [];
    let closes = 0;
    const stop = watchOpenFiles({
      guard,
      server: { closeIdleConnections: () => (closes++, 7) },
      log: (level, message) => lines.push(`${level} ${message}`),
      now: () => 0,
      read: () => readings.shift() ?? 50,
    });
    try {
      // Read at once, then every 500 ms: the last reading is the fourth.
      for (let waited = 0; (readings.length > 0 || lines.length < 2) && waited < 5_000; waited += 50) await Bun.sleep(50);
    } finally {
      stop();
    }
    expect(closes).toBe(2);
    expect(guard.counts.closedIdle).toBe(14);
    expect(lines).toEqual([
      "warn open files near the limit: idle connections closed, and answers close their connections until fewer are open",
      "info open files back below the pressure mark",
    ]);
  });
});
