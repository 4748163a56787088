import type { Database } from "bun:sqlite";

/**
 * The largest usage_records table rebuilt at start without AUTOINCREMENT (a copy of this many
 * rows took 0.7 s on a 2-core bench machine); a larger one keeps it (docs/decisions.md, "Fewer pages a commit").
 */
export const REBUILD_MAX_RECORDS = 200_000;

/**
 * usage_records was created with `INTEGER PRIMARY KEY AUTOINCREMENT`, which makes every insert
 * update its counter in sqlite_sequence: one more page in the write-ahead log of every commit
 * (six become five for a lone paid answer), ~12 % of a lone commit's CPU and ~9 % of a batch's.
 * Without it SQLite gives a new row the largest id plus one, the same ids here: records are never
 * deleted, and one writer (the gateway lock) inserts them in order. The rollup mark and the
 * ledger's id ranges rely on exactly that.
 *
 * SQLite cannot drop AUTOINCREMENT in place (Bun's build refuses writable_schema edits), so the
 * table is rebuilt from its own definition, columns in the same order, ids kept, its indexes made
 * again. Only a table of at most REBUILD_MAX_RECORDS rows is rebuilt, so an upgrade never holds
 * a gateway's start for minutes; a larger one keeps AUTOINCREMENT, which changes no id and no
 * charge, only that page. Runs inside the migration's transaction.
 */
export function dropUsageAutoincrement(db: Database, maxRecords = REBUILD_MAX_RECORDS): boolean {
  const table = db.query<{ sql: string }, []>("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'usage_records'").get();
  if (!table || !/\bAUTOINCREMENT\b/i.test(table.sql)) return false;
  const rows = db.query<{ n: number }, [number]>("SELECT COUNT(*) AS n FROM (SELECT 1 FROM usage_records LIMIT ?)").get(maxRecords + 1)!.n;
  if (rows > maxRecords) return false;
  const indexes = db.query<{ sql: string }, []>("SELECT sql FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'usage_records' AND sql IS NOT NULL").all();
  const rebuilt = table.sql.replace(/^CREATE TABLE\s+("?)usage_records\1/i, "CREATE TABLE usage_records_rebuilt").replace(/\s+AUTOINCREMENT\b/i, "");
  if (!rebuilt.startsWith("CREATE TABLE usage_records_rebuilt")) throw new Error("usage_records' definition is not the one this migration knows");
  db.exec(rebuilt);
  db.exec("INSERT INTO usage_records_rebuilt SELECT * FROM usage_records");
  db.exec("DROP TABLE usage_records");
  db.exec("ALTER TABLE usage_records_rebuilt RENAME TO usage_records");
  for (const index of indexes) db.exec(index.sql);
  db.exec("DELETE FROM sqlite_sequence WHERE name = 'usage_records'");
  return true;
}
