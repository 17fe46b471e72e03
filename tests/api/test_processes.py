"""How the local backend ends a trainer: its whole process tree, including processes that left the
trainer's process group for sessions of their own (as Ray's daemons may)."""

import os
import subprocess

import psutil

from kuberl_api.processes import TrainerProcesses
from testkit import wait_until


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_kill_ends_descendants_in_sessions_of_their_own():
    # A leader with a child in its group and another that made itself a session leader.
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 300 & setsid sleep 301 & wait"], start_new_session=True
    )

    def children() -> list[psutil.Process]:
        found = psutil.Process(leader.pid).children(recursive=True)
        started = sorted(p.cmdline() for p in found)  # each exec'd its sleep
        return found if started == [["sleep", "300"], ["sleep", "301"]] else []

    tree = wait_until(children, 10, "both sleeps")
    [escaped] = [p for p in tree if p.cmdline()[-1] == "301"]
    assert os.getsid(escaped.pid) != os.getsid(leader.pid)  # out of reach of a group kill

    TrainerProcesses().kill(leader.pid, psutil.Process(leader.pid).create_time())
    leader.wait(10)

    wait_until(lambda: not any(alive(p) for p in tree), 10, "every process of the tree gone")
