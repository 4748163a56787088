import { Database } from "bun:sqlite";
import { expect, test } from "bun:test";
import { classifyWriteFailure, isSqliteUnavailable } from "../../../../src/store/sqlite/sqlite-errors.ts";

/** The error a statement on `db` throws, as bun:sqlite raises it. */
function errorOf(db: Database, sql: string): unknown {
  try {
    db.exec(sql);
  } catch (err) {
    return err;
  }
  throw new Error(`no error from ${sql}`);
}

test("a store that cannot take writes now is unavailable (503, retry); a statement that is wrong is not (it stays a 500: retrying cannot help)", () => {
  const db = new Database(":memory:");
  db.exec("CREATE TABLE t (x INTEGER NOT NULL)");
  // Real errors, as the driver raises them.
  const syntax = errorOf(db, "SELEC 1");
  const missing = errorOf(db, "INSERT INTO nowhere VALUES (1)");
  const constraint = errorOf(db, "INSERT INTO t VALUES (NULL)");
  db.exec("PRAGMA query_only = 1");
  const readOnly = errorOf(db, "INSERT INTO t VALUES (1)");
  expect([syntax, missing, constraint].map(isSqliteUnavailable)).toEqual([false, false, false]);
  expect(isSqliteUnavailable(readOnly)).toBe(true);
  for (const code of ["SQLITE_FULL", "SQLITE_IOERR_WRITE", "SQLITE_BUSY", "SQLITE_READONLY_DBMOVED", "SQLITE_CANTOPEN"]) expect([code, isSqliteUnavailable({ code })]).toEqual([code, true]);
  for (const code of ["SQLITE_ERROR", "SQLITE_CONSTRAINT_NOTNULL", "SQLITE_MISMATCH", "SQLITE_CORRUPT"]) expect([code, isSqliteUnavailable({ code })]).toEqual([code, false]);
  // Not a store error at all.
  expect(isSqliteUnavailable(new Error("boom"))).toBe(false);
  // The settlement queue's view is unchanged: a constraint is the batch's fault.
  expect(classifyWriteFailure(constraint)).toBe("data");
  db.close();
});
