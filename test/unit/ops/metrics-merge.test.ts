import { describe, expect, test } from "bun:test";
import { mergeExpositions, withWorker } from "../../../src/ops/metrics-merge.ts";

const one = `# HELP switchyard_requests_total Finished requests.
# TYPE switchyard_requests_total counter
switchyard_requests_total{route="/v1/chat/completions",status="200"} 3
# HELP switchyard_inflight_requests In flight.
# TYPE switchyard_inflight_requests gauge
switchyard_inflight_requests 1
# HELP switchyard_upstream_seconds Attempts.
# TYPE switchyard_upstream_seconds histogram
switchyard_upstream_seconds_bucket{provider="p",le="0.1"} 2
switchyard_upstream_seconds_sum{provider="p"} 0.05
switchyard_upstream_seconds_count{provider="p"} 2
`;
const two = one.replace("} 3", "} 5").replace("switchyard_inflight_requests 1", "switchyard_inflight_requests 0");

describe("metrics across workers", () => {
  test("every worker's samples, labelled with its slot, each family under one HELP and TYPE", () => {
    expect(mergeExpositions([{ worker: 1, text: one }, { worker: 2, text: two }])).toBe(`# HELP switchyard_requests_total Finished requests.
# TYPE switchyard_requests_total counter
switchyard_requests_total{worker="1",route="/v1/chat/completions",status="200"} 3
switchyard_requests_total{worker="2",route="/v1/chat/completions",status="200"} 5
# HELP switchyard_inflight_requests In flight.
# TYPE switchyard_inflight_requests gauge
switchyard_inflight_requests{worker="1"} 1
switchyard_inflight_requests{worker="2"} 0
# HELP switchyard_upstream_seconds Attempts.
# TYPE switchyard_upstream_seconds histogram
switchyard_upstream_seconds_bucket{worker="1",provider="p",le="0.1"} 2
switchyard_upstream_seconds_sum{worker="1",provider="p"} 0.05
switchyard_upstream_seconds_count{worker="1",provider="p"} 2
switchyard_upstream_seconds_bucket{worker="2",provider="p",le="0.1"} 2
switchyard_upstream_seconds_sum{worker="2",provider="p"} 0.05
switchyard_upstream_seconds_count{worker="2",provider="p"} 2
`);
  });

  test("a family only one worker has is kept; labels with spaces and empty label sets are labelled right", () => {
    const merged = mergeExpositions([{ worker: 1, text: "# TYPE a counter\na 1\n" }, { worker: 3, text: "# TYPE b gauge\nb{} 2\n" }]);
    expect(merged).toBe('# TYPE a counter\na{worker="1"} 1\n# TYPE b gauge\nb{worker="3"} 2\n');
    expect(withWorker('m{model="a b"} 4', 2)).toBe('m{worker="2",model="a b"} 4');
  });
});
