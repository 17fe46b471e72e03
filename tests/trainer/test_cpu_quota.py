"""The CPUs a process may use: its affinity, bounded by its cgroup's CPU quota (a Kubernetes CPU
limit), so that a CNN learner in a pod limited to 2 CPUs on a big node runs 2 torch threads, not
one per node CPU (see cpu_quota.py); and the seconds a thread waited for a CPU. The cgroup and
schedstat files are written here as the kernel shows them, and the kernel's own read as well."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

import pytest

from kuberl_trainer.cpu_quota import SCHEDSTAT, cpu_quota, cpu_wait_s, usable_cpus
from kuberl_trainer.envs.spaces import SpaceInfo
from kuberl_trainer.job.trainer import learner_torch_threads


@pytest.fixture
def sixteen_cpus(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))


def write(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize(
    "files, quota",
    [
        ({"cpu.max": "200000 100000\n"}, 2.0),  # cgroup v2, limit 2
        ({"cpu.max": "250000 100000\n"}, 2.5),
        ({"cpu.max": "max 100000\n"}, None),  # no limit
        ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 0.5),  # v1
        ({"cpu,cpuacct/cpu.cfs_quota_us": "400000", "cpu,cpuacct/cpu.cfs_period_us": "100000"}, 4),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({}, None),  # no cgroup filesystem (macOS, a bare chroot)
        ({"cpu.max": "garbage"}, None),
        ({"cpu/cpu.cfs_quota_us": "x", "cpu/cpu.cfs_period_us": "100000"}, None),
    ],
)
def test_cpu_quota(tmp_path, files, quota):
    for name, text in files.items():
        write(tmp_path / name, text)
    assert cpu_quota(tmp_path) == quota


@pytest.mark.parametrize(
    "cpu_max, cpus",
    [("200000 100000", 2), ("250000 100000", 2), ("50000 100000", 1), ("max 100000", 16)],
)
@pytest.mark.usefixtures("sixteen_cpus")
def test_usable_cpus_rounds_the_quota_down_within_the_affinity(tmp_path, cpu_max, cpus):
    write(tmp_path / "cpu.max", cpu_max)
    assert usable_cpus(tmp_path) == cpus


@pytest.mark.usefixtures("sixteen_cpus")
def test_a_quota_above_the_affinity_gives_the_affinity(tmp_path):
    write(tmp_path / "cpu.max", "3200000 100000")
    assert usable_cpus(tmp_path) == 16


@pytest.mark.usefixtures("sixteen_cpus")
def test_a_cnn_learner_in_a_pod_limited_to_2_cpus_runs_2_threads(tmp_path, monkeypatch):
    from kuberl_trainer import cpu_quota as module

    write(tmp_path / "cpu.max", "200000 100000")
    monkeypatch.setattr(module, "CGROUP", tmp_path)
    mlp = SpaceInfo(
        obs_dim=4,
        obs_discrete_n=None,
        action_discrete_n=6,
        action_dim=1,
        action_low=None,
        action_high=None,
    )
    assert learner_torch_threads(dataclasses.replace(mlp, image=(4, 84, 84))) == 2
    assert learner_torch_threads(mlp) == 1  # an MLP learns on one thread anyway


def test_the_cpu_wait_is_schedstats_second_field_in_seconds(tmp_path):
    write(tmp_path / "schedstat", "5843021 1500000000 37\n")
    assert cpu_wait_s(tmp_path / "schedstat") == 1.5


@pytest.mark.parametrize("text", [None, "", "garbage here"])
def test_an_unreadable_schedstat_counts_no_wait(tmp_path, text):
    if text is not None:
        write(tmp_path / "schedstat", text)
    assert cpu_wait_s(tmp_path / "schedstat") == 0.0


@pytest.mark.skipif(not SCHEDSTAT.exists(), reason="needs Linux's /proc/thread-self/schedstat")
def test_a_thread_sharing_its_cpu_with_a_busy_process_waits_for_it():
    """This thread and a busy process pinned to one CPU: while the thread does 0.2 s of work,
    it waits for the CPU too, and its wait counts it (an idle machine would show none)."""
    affinity = os.sched_getaffinity(0)
    cpu = min(affinity)
    spin = f"import os; os.sched_setaffinity(0, {{{cpu}}}); print(flush=True)\nwhile True: pass"
    busy = subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE)
    try:
        busy.stdout.readline()  # pinned, and spinning from now on
        os.sched_setaffinity(0, {cpu})  # this thread only
        waited_before, work_before = cpu_wait_s(), time.thread_time()
        while time.thread_time() - work_before < 0.2:
            pass
        assert cpu_wait_s() - waited_before > 0.05
    finally:
        os.sched_setaffinity(0, affinity)
        busy.kill()
        busy.wait()


@pytest.mark.skipif(not SCHEDSTAT.exists(), reason="needs Linux's /proc/thread-self/schedstat")
def test_a_thread_that_sleeps_does_not_wait_for_a_cpu():
    """Waiting on I/O or a timer is not waiting for a CPU: a slow env that sleeps keeps its
    calls' time, and AsyncSamples keeps as many in flight as before. (Once awake, the thread may
    wait for a CPU on a busy machine: that part may count.)"""
    start = time.perf_counter()
    waited_before = cpu_wait_s()  # read within the timed span, as the one below
    time.sleep(0.3)
    waited = cpu_wait_s() - waited_before
    assert time.perf_counter() - start - waited >= 0.3
