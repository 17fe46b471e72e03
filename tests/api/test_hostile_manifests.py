"""Hostile manifests over real HTTP, with the server under a memory cap: bombs and values Kubernetes
cannot store get a prompt 422 naming the problem, never a 500 or a hang, and the server keeps
answering with what was stored before intact."""

from __future__ import annotations

import json
import math
import sqlite3
import time

import psutil
import pytest
import yaml
from apiserver import TOKEN, ApiClient, serving, small_job

from kuberl_api.store import JobStore

HEADROOM = 1024 * 1024 * 1024
"""Address space the capped server may grow by: plenty to answer, nothing like an expanded bomb."""


@pytest.fixture(scope="module")
def capped_api(tmp_path_factory):
    """A local backend that starts no trainer, its address space capped just above its size."""
    data_dir = tmp_path_factory.mktemp("api") / "data"
    with serving(data_dir, "--max-running", "0", env={"KUBERL_API_TOKEN": TOKEN}) as server:
        process = psutil.Process(server.process.pid)
        cap = process.memory_info().vms + HEADROOM
        process.rlimit(psutil.RLIMIT_AS, (cap, cap))
        yield server


@pytest.fixture
def api(capped_api):
    return ApiClient(capped_api.url, TOKEN)


def alias_bomb() -> str:
    job = yaml.safe_dump(small_job("bomb"), sort_keys=False)
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    config = "".join(f"      {line}\n" for line in lines)
    return job.replace("  trainer:\n", "  trainer:\n    envConfig:\n" + config, 1)


def deep_json(depth: int) -> str:
    text = json.dumps(small_job("deep") | {"extra": 0})
    return text.replace('"extra": 0', '"extra": ' + "[" * depth + "]" * depth)


def post(api: ApiClient, body: str, media_type: str):
    started = time.monotonic()
    response = api.request("POST", api.jobs(), data=body, headers={"Content-Type": media_type})
    return response, time.monotonic() - started


def problem_messages(response) -> list[str]:
    return [cause["message"] for cause in response.json()["details"]["causes"]]


HOSTILE = {
    "yaml-alias-bomb": (alias_bomb(), "application/yaml", "expands to over 100000 values"),
    "yaml-deep": ("a: " + "[" * 200_000 + "]" * 200_000, "application/yaml", "levels deep"),
    "json-deep": (deep_json(200_000), "application/json", "levels deep"),
    "json-deep-under-the-recursion-limit": (deep_json(500), "application/json", "levels deep"),
    "json-nan": (
        json.dumps(small_job("nan")).replace('"timesteps": 1024', '"timesteps": NaN'),
        "application/json",
        "NaN is not a JSON number",
    ),
    "yaml-infinite-stop": (
        yaml.safe_dump(small_job("inf")).replace("timesteps: 1024", "timesteps: .inf"),
        "application/yaml",
        "inf is not a finite number",
    ),
    "yaml-nan-env-config": (
        yaml.safe_dump(small_job("nan-config") | {}).replace(
            "  trainer:\n", "  trainer:\n    envConfig: {scale: .nan}\n", 1
        ),
        "application/yaml",
        "nan is not a finite number",
    ),
    "json-beyond-int64": (
        json.dumps(small_job("big")).replace('"seed": 0', '"seed": 92233720368547758070'),
        "application/json",
        "does not fit in the 64-bit integers",
    ),
}


@pytest.mark.parametrize(("body", "media_type", "expected"), HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_bodies_get_a_prompt_422_and_the_server_stays_up(api, body, media_type, expected):
    kept = small_job("kept-" + str(abs(hash(body)) % 10**8))
    assert api.submit(kept).status_code == 201

    response, seconds = post(api, body, media_type)

    assert response.status_code == 422, response.text[:500]
    assert any(expected in message for message in problem_messages(response)), response.text
    assert seconds < 10
    assert api.request("GET", "/healthz").text == "ok"
    listing = api.request("GET", api.jobs())
    assert listing.status_code == 200
    names = [item["metadata"]["name"] for item in listing.json()["items"]]
    assert kept["metadata"]["name"] in names
    assert not {"bomb", "deep", "nan", "inf", "nan-config", "big"} & set(names)


def test_a_diverged_return_is_stored_as_null_and_every_answer_stays_json(tmp_path):
    store = JobStore(tmp_path / "jobs.db")
    document = small_job("diverged") | {"status": {"phase": "Running"}}
    document["status"]["progress"] = {"episodeReturnMean": math.nan, "iteration": 3}

    store.insert("default", "diverged", document)

    text = store.get_document_json("default", "diverged")
    strict = json.loads(text, parse_constant=pytest.fail)
    assert strict["status"]["progress"] == {"episodeReturnMean": None, "iteration": 3}
    store.close()


def test_documents_stored_with_nan_by_an_earlier_version_are_made_strict(tmp_path):
    path = tmp_path / "jobs.db"
    JobStore(path).close()
    document = small_job("old") | {"status": {"phase": "Failed", "progress": {"x": math.inf}}}
    with sqlite3.connect(path) as db:  # as an earlier version wrote it: Infinity in the text
        db.execute(
            "INSERT INTO jobs (namespace, name, seq, phase, document) VALUES (?, ?, 1, ?, ?)",
            ("default", "old", "Failed", json.dumps(document)),
        )

    store = JobStore(path)

    text = store.get_document_json("default", "old")
    assert json.loads(text, parse_constant=pytest.fail)["status"]["progress"] == {"x": None}
    assert store.get("default", "old").document["spec"] == document["spec"]
    store.close()
