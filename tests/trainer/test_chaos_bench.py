"""`bench/chaos.py --quick`: a short undisturbed run, then runs with spot nodes killed and the
driver SIGTERMed, on a multi-node Ray on loopback. Every fault is survived, no completed iteration
is lost, and the JSON report says so. (A smoke run: returns are not measured here.)"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CHAOS = Path(__file__).parents[2] / "bench" / "chaos.py"


def test_quick_chaos_run_survives_every_fault(tmp_path):
    done = subprocess.run(
        [sys.executable, str(CHAOS), "--quick", "--results-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]
    [path] = tmp_path.glob("chaos-*.json")
    report = json.loads(path.read_text())
    scenarios = {s["scenario"]: s for s in report["scenarios"]}
    budget = report["meta"]["args"]["timesteps"]  # every run's stop.timesteps
    assert set(scenarios) == {"undisturbed", "node-kills", "sigterms"}
    for name in ("node-kills", "sigterms"):
        scenario = scenarios[name]
        assert scenario["finished"], scenario
        assert scenario["faults"] >= 1 and scenario["survived"] == scenario["faults"], scenario
        assert scenario["timesteps"] >= budget  # went as far as the undisturbed run
    for stop in scenarios["sigterms"]["sigterms"]:
        assert stop["completed_iterations_lost"] == 0, stop
        assert stop["exit_s"] < 20, stop
    assert "| node kills |" in done.stdout and "| SIGTERMs |" in done.stdout
