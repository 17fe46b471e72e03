"""REST API load: GET /v1/namespaces/{ns}/jobs/{name} with 1,000 stored jobs, local backend.

The server (`kuberl serve --max-running 0`: jobs are stored, none runs) is pinned to CPU 0 and this
load generator (asyncio + aiohttp, keep-alive connections) to CPU 1, talking over loopback. Prints
requests/s and latency percentiles of the measured window as a Markdown table row.

    python bench/api_load.py [--jobs 1000] [--seconds 20] [--connections 16]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job(name: str) -> dict:
    document = yaml.safe_load((ROOT / "deploy/examples/cartpole-ppo.yaml").read_text())
    document["metadata"] = {"name": name, "labels": {"bench": "api"}}
    return document


async def wait_ready(session: aiohttp.ClientSession, url: str) -> None:
    for _ in range(300):
        try:
            async with session.get(url + "/readyz") as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.1)
    raise SystemExit("the API did not become ready")


async def seed(session: aiohttp.ClientSession, url: str, count: int) -> list[str]:
    names = [f"job-{index:04d}" for index in range(count)]
    semaphore = asyncio.Semaphore(16)

    async def submit(name: str) -> None:
        async with semaphore, session.post(url + "/v1/namespaces/bench/jobs", json=job(name)) as r:
            assert r.status == 201, await r.text()

    await asyncio.gather(*(submit(name) for name in names))
    return names


async def load(
    session: aiohttp.ClientSession, url: str, names: list[str], seconds: float, connections: int
) -> list[float]:
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        rng = random.Random()
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            async with session.get(f"{url}/v1/namespaces/bench/jobs/{rng.choice(names)}") as r:
                await r.read()
                assert r.status == 200
            latencies.append(time.perf_counter() - started)

    await asyncio.gather(*(worker() for _ in range(connections)))
    return latencies


async def main(args: argparse.Namespace) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as data_dir:
        command = [sys.executable, "-m", "kuberl_cli.main", "serve", "--port", str(port)]
        server = subprocess.Popen(
            [*command, "--data-dir", data_dir, "--max-running", "0"],
            env={**os.environ, "KUBERL_API_TOKEN": TOKEN},
            preexec_fn=lambda: os.sched_setaffinity(0, {args.server_cpu}),
        )
        os.sched_setaffinity(0, {args.client_cpu})
        try:
            connector = aiohttp.TCPConnector(limit=args.connections)
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with aiohttp.ClientSession(connector=connector, headers=headers) as session:
                await wait_ready(session, url)
                names = await seed(session, url, args.jobs)
                await load(session, url, names, 2, args.connections)  # warm-up
                latencies = await load(session, url, names, args.seconds, args.connections)
        finally:
            server.terminate()
            server.wait(10)
    latencies.sort()
    rate = len(latencies) / args.seconds
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[int(len(latencies) * 0.99)] * 1000
    print("| jobs stored | connections | requests/s | p50 ms | p99 ms |")
    print("|---:|---:|---:|---:|---:|")
    print(f"| {args.jobs:,} | {args.connections} | {rate:,.0f} | {p50:.2f} | {p99:.2f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    asyncio.run(main(parser.parse_args()))
