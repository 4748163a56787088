import { expect, test } from "bun:test";
import { latencySaid } from "../../../src/console/client/latency-said.ts";

test("a latency inside the histogram's first bucket is said as under its bound, not as the interpolated figure (a console probe)", () => {
  expect(latencySaid(13, 25)).toBe("under 25 ms");
  expect(latencySaid(25, 25)).toBe("under 25 ms");
  expect(latencySaid(38, 25)).toBe("38 ms");
  expect(latencySaid(1_250, 25)).toBe("1,250 ms");
  expect(latencySaid(null, 25)).toBe("—");
  // An older gateway's answer without the bound: the figure as it came.
  expect(latencySaid(13, undefined)).toBe("13 ms");
});
