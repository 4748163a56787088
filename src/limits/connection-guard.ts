import { addressBlock } from "./address-block.ts";

/**
 * Keeps file descriptors for the tenants. Every connection is one, and a process has so many
 * (RLIMIT_NOFILE): a client with no key that opened 20,000 keep-alive connections, sent one
 * `GET /health` on each and left them idle held the gateway at its limit, and no tenant could
 * connect until it stopped (a hostile-tenant probe, twenty-sixth session). Bun tells a server
 * nothing when a connection opens or closes, so the guard works from what it does see:
 *
 * - how many descriptors the process has open (`observe`, read by a watchdog twice a second);
 * - the client address and port of each request (`arrive`): a port it has not seen from that
 *   address is a new connection.
 *
 * Below a quarter of the limit nothing is tracked and a request costs one boolean test (asking Bun
 * for a request's address costs ~2 µs, 2–3 % of a request's CPU). From there on, an address block
 * (addressBlock: an IPv6 /64 as one) keeps at most `perAddress` connections open between
 * requests: the answer of a request on one more carries `Connection: close`, so it is served and
 * then closed (never refused: a client behind a busy NAT or a proxy pays reconnects, not errors).
 * At 80 % of the limit, the watchdog closes every idle keep-alive connection at once
 * (`server.closeIdleConnections()`) and until the count is below 60 % every answer closes its
 * connection; each such closing starts the tracking afresh (what was tracked was closed).
 *
 * A connection counts from the last request seen on it until it would be closed as idle
 * (`windowMs`: the idle timeout and Bun's timer's slack). A long stream is not counted past that
 * (its account's limits bound streams); nor is a connection that never sent a request (Bun closes
 * those after ~10 s by itself, and nothing here can see them). Pure: time comes in as `now`.
 */
export interface ConnectionGuard {
  /** Whether requests are being tracked (the process holds a quarter of its limit or more): `arrive` is called only then. */
  readonly armed: boolean;
  /** A request from `address`'s `port`: true when its answer should close its connection. */
  arrive(address: string, port: number, now: number): boolean;
  /** The watchdog's reading of the process's open descriptors: true when idle connections should be closed now. */
  observe(open: number): boolean;
  /** Idle connections the watchdog closed after `observe` said to. */
  shed(closed: number): void;
  /** What the guard did, for `/metrics`. */
  readonly counts: ConnectionGuardCounts;
}

export interface ConnectionGuardCounts {
  /** Answers that closed their connection: one connection too many from their address, or the process under pressure. */
  closedOverAddressCap: number;
  closedUnderPressure: number;
  /** Idle connections closed at once by the watchdog. */
  closedIdle: number;
  /** Times the process reached 80 % of its descriptors. */
  pressureEpisodes: number;
  /** The last reading, and the limit (undefined where unknown). */
  open: number | undefined;
  limit: number | undefined;
}

/** Tracking starts at this share of the limit and stops below the second (hysteresis: not on and off every reading). */
const ARM_SHARE = 0.25;
const DISARM_SHARE = 0.15;
/** Idle connections are closed at once from this share, and answers close theirs until below the second. */
const PRESSURE_SHARE = 0.8;
const RELIEF_SHARE = 0.6;
/** Connections tracked in all: past it new ones are not tracked, and their answers close them. */
const MAX_TRACKED = 262_144;
/** An address block at its cap looks for expired connections at most this often. */
const SWEEP_EVERY_MS = 1_000;

class Block {
  /** Connection (address and port) → when its last request came. */
  readonly seen = new Map<string, number>();
  sweptAt = 0;
}

export function createConnectionGuard(o: { perAddress: number; windowMs: number; limit: number | undefined }): ConnectionGuard {
  const limit = o.limit !== undefined && o.limit > 0 ? o.limit : undefined;
  const blocks = new Map<string, Block>();
  /** A connection's key → its block, so a known connection's request needs no addressBlock(). */
  const known = new Map<string, Block>();
  let armed = false;
  let pressure = false;
  let sweptAllAt = 0;
  const counts: ConnectionGuardCounts = { closedOverAddressCap: 0, closedUnderPressure: 0, closedIdle: 0, pressureEpisodes: 0, open: undefined, limit };

  const sweep = (block: Block, now: number) => {
    block.sweptAt = now;
    for (const [key, at] of block.seen) {
      if (now - at < o.windowMs) continue;
      block.seen.delete(key);
      known.delete(key);
    }
  };

  return {
    get armed() {
      return armed;
    },
    counts,
    arrive(address, port, now) {
      // Forgotten blocks and connections leave no entries behind (once a window, over everything tracked).
      if (now - sweptAllAt >= o.windowMs) {
        sweptAllAt = now;
        for (const [name, block] of blocks) {
          sweep(block, now);
          if (block.seen.size === 0) blocks.delete(name);
        }
      }
      const key = `${address}|${port}`;
      const mine = known.get(key);
      if (mine !== undefined) {
        mine.seen.set(key, now);
        if (pressure) counts.closedUnderPressure++;
        return pressure;
      }
      if (pressure) {
        counts.closedUnderPressure++;
        return true;
      }
      if (o.perAddress <= 0) return false;
      const name = addressBlock(address);
      let block = blocks.get(name);
      if (block === undefined) {
        block = new Block();
        blocks.set(name, block);
      }
      if (block.seen.size >= o.perAddress && now - block.sweptAt >= SWEEP_EVERY_MS) sweep(block, now);
      if (block.seen.size >= o.perAddress || known.size >= MAX_TRACKED) {
        counts.closedOverAddressCap++;
        return true;
      }
      block.seen.set(key, now);
      known.set(key, block);
      return false;
    },
    observe(open) {
      counts.open = open;
      if (limit === undefined) return false;
      if (!armed && open >= limit * ARM_SHARE) armed = true;
      else if (armed && !pressure && open < limit * DISARM_SHARE) {
        armed = false;
        // Nothing is tracked while unarmed: what was would only go stale.
        blocks.clear();
        known.clear();
      }
      if (!pressure && open >= limit * PRESSURE_SHARE) {
        pressure = true;
        armed = true;
        counts.pressureEpisodes++;
      } else if (pressure && open < limit * RELIEF_SHARE) pressure = false;
      return pressure;
    },
    shed(closed) {
      counts.closedIdle += closed;
      // What was tracked is gone: idle connections were just closed, and a busy one's answer closes it
      // while the pressure lasts. Kept, the closed ports would hold their address's slots for a window
      // after the pressure, and every reconnect from it (a NAT's tenants too) would be closed in turn
      // (a probe of twenty addresses, twenty-eighth session: ~600,000 reconnects in a minute).
      blocks.clear();
      known.clear();
    },
  };
}
