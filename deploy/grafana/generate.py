"""Writes kuberl's Grafana dashboards: `python deploy/grafana/generate.py` (a test fails when the
committed JSON differs from what this writes).

- kuberl-fleet.json: every job at a glance (phases, preemptions, restarts, samples/s, GPU use, the
  operator and the API);
- kuberl-training.json: one job's training, chosen with the `namespace` and `rljob` variables;
- kuberl-spot.json: spot and cost (preemptions, time lost to them, worker-hours and dollars by
  capacity).

Plain dicts. The metric names come from the code that exports them (kuberl_contract.progress_row,
kuberl_operator.constants, kuberl_api.metrics), so a renamed metric changes its panels with it. The
dashboards use a `${datasource}` variable, so they import into any Grafana with a Prometheus data
source (the Helm chart ships them as ConfigMaps for Grafana's dashboard sidecar). Series carry the
RLJob's name in `rljob` (`job` stays Prometheus's scrape job: deploy/prometheus/kuberl-alerts.yaml);
panels of series only a cluster exports say so in their description (kube-state-metrics'
kube_pod_*, NVIDIA DCGM exporter's DCGM_FI_*).

One module per dashboard (fleet.py, training.py, spot.py), built from the blocks in panels.py;
this script only assembles and writes them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The dashboards' modules sit beside this script, in a folder that is no package: run as a script,
# Python puts this folder on the path; imported from its file (as the tests do), this puts it there.
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from fleet import fleet  # noqa: E402
from spot import spot  # noqa: E402
from training import training  # noqa: E402

DASHBOARDS = {
    "kuberl-fleet.json": fleet,
    "kuberl-training.json": training,
    "kuberl-spot.json": spot,
}


def render(build: Any) -> str:
    return json.dumps(build(), indent=2) + "\n"


def main() -> None:
    for name, build in DASHBOARDS.items():
        (HERE / name).write_text(render(build))
        print(f"wrote {HERE / name}", file=sys.stderr)


if __name__ == "__main__":
    main()
