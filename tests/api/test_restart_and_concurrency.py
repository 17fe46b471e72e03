"""The local backend's durability: an API that dies while jobs run finds them again, and
concurrent submissions neither lose nor duplicate a job."""

import os
import signal
import sqlite3
import subprocess
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest
from apiserver import TOKEN, ApiClient, ApiServer, small_job

from testkit import wait_until

pytestmark = pytest.mark.timeout(180)
ENV = {"KUBERL_API_TOKEN": TOKEN}
ITERATIONS = 200  # far more than can pass between seeing iteration 2 and the freeze


def trainer_of(server: ApiServer, name: str) -> int:
    pids = wait_until(
        lambda: [
            pid
            for pid in server.trainer_pids()
            if any(f"/{name}/" in part for part in psutil.Process(pid).cmdline())
        ],
        30,
        f"the trainer of {name}",
    )
    assert len(pids) == 1
    return pids[0]


def test_a_restarted_api_reattaches_running_trainers(tmp_path):
    server = ApiServer(tmp_path / "data", "--max-running", "2", env=ENV).start()
    try:
        client = ApiClient(server.url, TOKEN)
        assert client.submit(small_job("survivor", iterations=ITERATIONS)).status_code == 201
        wait_until(
            lambda: client.job("survivor")["status"]["progress"]["iteration"] >= 2, 60, "run"
        )
        pid = trainer_of(server, "survivor")
        # Frozen while the API is away, so it is still running when the API comes back however
        # long the restart takes on a busy machine; it goes on from where it was once thawed.
        os.killpg(pid, signal.SIGSTOP)
        trainer = psutil.Process(pid)
        wait_until(lambda: trainer.status() == psutil.STATUS_STOPPED, 10, "the trainer to freeze")

        server.stop(signal.SIGKILL)  # the API dies; its trainer goes on
        assert psutil.pid_exists(pid)

        server.start()
        client = ApiClient(server.url, TOKEN)
        job = client.job("survivor")
        assert job["status"]["phase"] == "Running"  # re-attached, not restarted
        assert trainer_of(server, "survivor") == pid
        os.killpg(pid, signal.SIGCONT)
        done = client.wait_phase("survivor", "Succeeded", "Failed", timeout=120)
        assert done["status"]["phase"] == "Succeeded", done["status"]
        history = client.request("GET", client.jobs(name="survivor", action="progress")).json()
        assert [row["iteration"] for row in history["items"]] == list(range(1, ITERATIONS + 1))
        log = client.request("GET", client.jobs(name="survivor", action="logs")).text
        assert "Resuming" not in log  # one uninterrupted trainer
    finally:
        server.stop()
        server.kill_trainers()


def test_trainers_lost_while_the_api_was_down_are_failed_with_the_reason(tmp_path):
    server = ApiServer(tmp_path / "data", "--max-running", "2", env=ENV).start()
    impostor = None
    try:
        client = ApiClient(server.url, TOKEN)
        for name in ("killed", "reused"):
            assert client.submit(small_job(name, iterations=100_000)).status_code == 201
        wait_until(lambda: client.phase("killed") == client.phase("reused") == "Running", 60, "run")
        killed, reused = trainer_of(server, "killed"), trainer_of(server, "reused")

        server.stop(signal.SIGKILL)
        for pid in (killed, reused):
            os.killpg(pid, signal.SIGKILL)  # no exit status is written
        wait_until(lambda: not psutil.pid_exists(killed), 10, "the trainer to end")
        # "reused": its PID now belongs to another process (one started later), as after a reboot
        # or PID wrap-around; the API must not take it for its trainer.
        impostor = subprocess.Popen(["sleep", "60"])
        database = sqlite3.connect(server.data_dir / "jobs.db")
        with database:
            database.execute("UPDATE jobs SET pid = ? WHERE name = 'reused'", (impostor.pid,))
        database.close()

        server.start()
        client = ApiClient(server.url, TOKEN)
        for name in ("killed", "reused"):
            status = client.job(name)["status"]
            assert status["phase"] == "Failed", status
            failed = next(c for c in status["conditions"] if c["type"] == "Failed")
            assert failed["status"] == "True" and failed["reason"] == "TrainerLost"
            assert "ended while the API was down" in failed["message"]
            assert status["completionTime"]
        assert impostor.poll() is None  # the impostor was left alone
    finally:
        if impostor is not None:
            impostor.kill()
            impostor.wait()
        server.stop()
        server.kill_trainers()


def test_fifty_concurrent_submissions(queue_api, queue_client):
    names = [f"burst-{index:02d}" for index in range(50)]
    attempts = names + names[:10]  # ten names twice: exactly one of each pair may win

    def submit(name: str) -> int:
        return ApiClient(queue_api.url, TOKEN).submit(small_job(name), "burst").status_code

    with ThreadPoolExecutor(max_workers=25) as pool:
        codes = list(pool.map(submit, attempts))
    assert codes.count(201) == 50 and codes.count(409) == 10
    for name in names[:10]:
        assert sorted(code for n, code in zip(attempts, codes, strict=True) if n == name) == [
            201,
            409,
        ]
    items = queue_client.request("GET", queue_client.jobs("burst")).json()["items"]
    assert sorted(item["metadata"]["name"] for item in items) == names
    assert len({item["metadata"]["uid"] for item in items}) == 50
    assert all(item["status"]["phase"] == "Pending" for item in items)  # queued: --max-running 0
