import type { AccountStore } from "../accounts/account-store.ts";
import type { Settlement } from "../billing/ledger.ts";
import type { AlertSettings } from "../config/load-config.ts";
import type { Logger } from "../log/log.ts";
import { createAlertDispatcher } from "./alert-dispatcher.ts";
import type { AlertOutbox } from "./alert-outbox.ts";
import { createAlertMonitor } from "./alert-monitor.ts";

export interface AlertsDeps {
  settings: AlertSettings;
  accounts: Pick<AccountStore, "spendStatus">;
  outbox: AlertOutbox;
  now: () => number;
  log: Logger;
  /** How often an idle dispatcher looks at the outbox. */
  pollMs?: number;
}

export type Alerts = ReturnType<typeof createAlerts>;

/** Spend alerts: the monitor (detection after commits and at start) and the dispatcher (delivery). */
export function createAlerts(d: AlertsDeps) {
  const counts = { queued: 0, delivered: 0, failed: 0 };
  const dispatcher = createAlertDispatcher({
    outbox: d.outbox,
    url: d.settings.webhook_url,
    secret: d.settings.secret,
    timeoutMs: d.settings.timeout_ms,
    retryInitialMs: d.settings.retry_initial_ms,
    retryMaxMs: d.settings.retry_max_ms,
    pollMs: d.pollMs,
    log: d.log,
    onDelivered: () => counts.delivered++,
    onFailed: () => counts.failed++,
  });
  const monitor = createAlertMonitor({
    accounts: d.accounts,
    outbox: d.outbox,
    lowBalance: d.settings.low_balance,
    now: d.now,
    log: d.log,
    onQueued(n) {
      counts.queued += n;
      dispatcher.wake();
    },
  });
  let started = false;
  return {
    counts,
    /** The ledger's `onCommitted` hook. */
    committed: (settlements: Settlement[]) => monitor.committed(settlements),
    /** Checks every key and account once (what a crash may have left undetected), and starts delivering. */
    start(): void {
      if (started) return;
      started = true;
      void monitor.checkAll();
      dispatcher.start();
    },
    /** Resolves once the checks noted so far have queued their events. */
    checked: () => monitor.idle(),
    async stop(): Promise<void> {
      started = false;
      await dispatcher.stop();
    },
  };
}
