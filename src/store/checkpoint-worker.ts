/**
 * The WAL checkpointer's thread (see wal-checkpointer.ts): its own connection to the database
 * file, a PASSIVE checkpoint every `intervalMs`. PASSIVE copies what no reader still needs and
 * never waits for a lock, so the request thread's writes are not held up by it.
 */
import { Database } from "bun:sqlite";

declare const self: Worker;

export type CheckpointCommand = { type: "start"; path: string; intervalMs: number } | { type: "stop" };
export type CheckpointReport = { type: "ready" } | { type: "failed"; message: string } | { type: "stopped" };

let db: Database | undefined;
let timer: ReturnType<typeof setInterval> | undefined;

const report = (message: CheckpointReport) => self.postMessage(message);

function checkpoint(): void {
  try {
    db?.query("PRAGMA wal_checkpoint(PASSIVE)").get();
  } catch (err) {
    // SQLITE_BUSY from another checkpointer (the admin CLI, a second gateway): the next tick retries.
    if (!/busy|locked/i.test(String(err))) {
      stop();
      report({ type: "failed", message: String(err) });
    }
  }
}

function stop(): void {
  if (timer) clearInterval(timer);
  timer = undefined;
  try {
    db?.close();
  } catch {}
  db = undefined;
}

self.onmessage = (event: MessageEvent<CheckpointCommand>) => {
  const command = event.data;
  if (command.type === "start") {
    try {
      // Never create: a file that is not there is a wrong path, not a database to start.
      db = new Database(command.path, { readwrite: true, create: false });
      db.exec("PRAGMA busy_timeout = 1000;");
      timer = setInterval(checkpoint, command.intervalMs);
      report({ type: "ready" });
    } catch (err) {
      stop();
      report({ type: "failed", message: String(err) });
    }
  } else {
    // One last pass, so a clean shutdown leaves little for the next start to replay.
    checkpoint();
    stop();
    report({ type: "stopped" });
  }
};
