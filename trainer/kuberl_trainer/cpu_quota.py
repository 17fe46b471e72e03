"""The CPUs this process may use: those it may run on (its affinity), bounded by its cgroup's CPU
quota, which is what a Kubernetes CPU limit becomes; and how long a thread waited for one.

A learner's pod limited to 2 CPUs on a 64-core node has all 64 in its affinity. A CNN learner with
64 torch threads there would get 2 CPUs' worth of time per scheduling period, used up by its
threads within the first few milliseconds, and every thread would then wait for the next period
(CFS throttling): many times slower than 2 threads. Like Go's automaxprocs, the quota is rounded
down (a limit of 2.5 CPUs gives 2 threads), and never below 1."""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
SCHEDSTAT = Path("/proc/thread-self/schedstat")


def usable_cpus(cgroup: Path | None = None) -> int:
    cpus = len(os.sched_getaffinity(0))
    quota = cpu_quota(CGROUP if cgroup is None else cgroup)
    return cpus if quota is None else max(1, min(cpus, math.floor(quota)))


def cpu_quota(cgroup: Path) -> float | None:
    """CPUs' worth of time per period the cgroup allows (cgroup v2's cpu.max, or v1's
    cpu.cfs_quota_us over cpu.cfs_period_us), or None when unlimited or unreadable."""
    try:
        quota, period = (cgroup / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    for directory in (cgroup / "cpu", cgroup / "cpu,cpuacct"):
        try:
            quota = int((directory / "cpu.cfs_quota_us").read_text())
            period = int((directory / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        return None if quota <= 0 or period <= 0 else quota / period
    return None


def cpu_wait_s(schedstat: Path = SCHEDSTAT) -> float:
    """Seconds the calling thread has spent runnable but waiting for a CPU (the second field of
    Linux's schedstat), or 0.0 where that cannot be read: the part of a call's time that came
    from sharing oversubscribed CPUs, not from its own work or its waits on I/O."""
    try:
        return int(schedstat.read_text().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0
