"""The operator's log relay in a process of its own, as the operator serves it (over a Reconciler's
Jobs API clients, settings from KUBERL_* variables), so that what it holds can be measured apart
from its callers: `python relay_process.py KUBECONFIG TOKEN` prints the port it serves on, and, on
a line read from its stdin, prints what it held at most as JSON and exits.

The report: `traced_peak`, the most bytes Python held at once (tracemalloc, from the start of
serving), and `peak_rss_growth`, how far the process's peak resident memory (VmHWM) grew beyond
its resident memory when it began serving."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import tracemalloc
from pathlib import Path

from kuberl_operator import log_relay
from kuberl_operator.kube import Kube, load_kube_config
from kuberl_operator.metrics import OperatorMetrics
from kuberl_operator.reconciler import Reconciler
from kuberl_operator.settings import OperatorSettings


def memory_kib(field: str) -> int:
    """A line of /proc/self/status in KiB (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise KeyError(field)


def report_on_stdin(resident_at_start: int) -> None:
    sys.stdin.readline()
    report = {
        "traced_peak": tracemalloc.get_traced_memory()[1],
        "peak_rss_growth": (memory_kib("VmHWM") - resident_at_start) * 1024,
    }
    print(json.dumps(report), flush=True)
    os._exit(0)


async def main(kubeconfig: str, token: str) -> None:
    settings = OperatorSettings.from_env(os.environ)
    reconciler = Reconciler(Kube(load_kube_config(Path(kubeconfig))), settings, OperatorMetrics())
    runner = await log_relay.serve(0, token, reconciler.observer.jobs_client, host="127.0.0.1")
    resident = memory_kib("VmRSS")
    tracemalloc.start()
    threading.Thread(target=report_on_stdin, args=(resident,), daemon=True).start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
