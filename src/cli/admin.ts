import { openDatabase } from "../store/database.ts";
import { createAccountStore } from "../accounts/account-store.ts";
import { creditsToMicro } from "../billing/money.ts";

const USAGE = `usage: bun run admin <command>
  accounts create <name> <credits>     create an account; prints {id, name, balance}
  keys create <account-id> [name]      issue a key; prints it once
  keys revoke <key-id>                 revoke a key (takes effect on the next request)
Works on the SQLite file directly (SWITCHYARD_DB, default ./data/switchyard.sqlite), also while the gateway runs.`;

/** The admin API's operations for a shell, without a running gateway or an admin token. */
export function runAdmin(argv: string[], env: Record<string, string | undefined>): { code: number; out: string } {
  const [noun, verb, ...args] = argv;
  const db = openDatabase(env.SWITCHYARD_DB ?? "./data/switchyard.sqlite");
  try {
    const accounts = createAccountStore(db, Date.now);
    if (noun === "accounts" && verb === "create" && args.length === 2) {
      let micro: number;
      try {
        micro = creditsToMicro(Number(args[1]));
      } catch (err) {
        return { code: 2, out: `credits: ${(err as Error).message}` };
      }
      const account = accounts.createAccount(args[0]!, micro);
      return { code: 0, out: JSON.stringify({ id: account.id, name: account.name, balance: account.balance }) };
    }
    if (noun === "keys" && verb === "create" && args.length >= 1) {
      const key = accounts.createKey(args[0]!, args[1] ?? null);
      return key ? { code: 0, out: JSON.stringify(key) } : { code: 1, out: `no account ${args[0]}` };
    }
    if (noun === "keys" && verb === "revoke" && args.length === 1) {
      return accounts.revokeKey(args[0]!) ? { code: 0, out: JSON.stringify({ id: args[0], revoked: true }) } : { code: 1, out: `no active key ${args[0]}` };
    }
    return { code: 2, out: USAGE };
  } finally {
    db.close();
  }
}

if (import.meta.main) {
  const { code, out } = runAdmin(process.argv.slice(2), process.env);
  (code === 0 ? console.log : console.error)(out);
  process.exit(code);
}
