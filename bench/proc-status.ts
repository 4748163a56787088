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
 * Idle RSS: the lowest reading over 12 s without load. The runtime frees memory in collections
 * that its own timers start a variable time after the load stops (measured: 1 s once, 11 s the
 * next time), so a single reading at a fixed delay compares two random points of that cycle, and
 * a leak-free run "grew" 4 MB per 10k requests, or shrank, by chance. A leak survives collections.
 */
export async function idleRssKb(pid: number, windowMs = 12_000): Promise<number> {
  let lowest = Infinity;
  for (const end = performance.now() + windowMs; performance.now() < end; await Bun.sleep(200)) lowest = Math.min(lowest, readStatusKb(pid, "VmRSS"));
  return lowest;
}
