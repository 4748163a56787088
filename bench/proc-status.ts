import { readFileSync } from "node:fs";

/** A `/proc/<pid>/status` figure in kB (NaN once the process is gone). */
export function readStatusKb(pid: number, field: "VmRSS" | "VmHWM"): number {
  try {
    const m = readFileSync(`/proc/${pid}/status`, "utf8").match(new RegExp(`${field}:\\s+(\\d+)`));
    return m ? Number(m[1]) : NaN;
  } catch {
    return NaN;
  }
}

/**
 * Idle RSS: the lowest reading over 25 s without load. The runtime frees memory in collections
 * that its own timers start a variable time after the load stops (measured: 1 s once, 10–12 s
 * other times, by 1 s samples after a load), so a reading at a fixed delay, or over a window
 * shorter than that, compares two random points of that cycle: a leak-free gateway "grew" 4 MB
 * per 10k requests, or shrank, by chance. A leak survives collections.
 */
export async function idleRssKb(pid: number, windowMs = 25_000): Promise<number> {
  let lowest = Infinity;
  for (const end = performance.now() + windowMs; performance.now() < end; await Bun.sleep(200)) lowest = Math.min(lowest, readStatusKb(pid, "VmRSS"));
  return lowest;
}
