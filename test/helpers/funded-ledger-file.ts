import { openDatabase } from "../../src/store/database.ts";
import { createAccountStore } from "../../src/store/sqlite/sqlite-accounts.ts";

/** A SQLite ledger file at `path` with one account of `credits` micro-credits and a key, closed again. */
export function fundedLedgerFile(path: string, credits = 1_000_000): { accountId: string; keyId: string } {
  const setup = openDatabase(path);
  try {
    const accounts = createAccountStore(setup, Date.now);
    const account = accounts.createAccount("spill", credits);
    return { accountId: account.id, keyId: accounts.createKey(account.id, "k")!.id };
  } finally {
    setup.close();
  }
}
