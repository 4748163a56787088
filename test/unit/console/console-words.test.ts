import { expect, test } from "bun:test";
import { consoleWords } from "../../../src/console/client/api.ts";

/** The admin API's refusals as the console's forms name their fields (a console probe: the page showed JSON names). */
test("a refusal names its field as the forms do, and 'null' as an empty field", () => {
  expect(consoleWords("Invalid request: spend_limit: must be a number of credits from 0 to 1000000000 (at most 6 decimals), or null for none.")).toBe(
    "Spend limit: must be a number of credits from 0 to 1000000000 (at most 6 decimals), or empty for none.",
  );
  expect(consoleWords("name must hold more than spaces.")).toBe("Name must hold more than spaces.");
  expect(consoleWords("models: a list of model ids or null for every model")).toBe("Models: a list of model ids, or empty for every model");
  // Words that begin with no field are left as they are.
  expect(consoleWords("the gateway did not answer.")).toBe("the gateway did not answer.");
});
