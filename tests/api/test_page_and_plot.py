"""The learning-curve endpoint and the status page over real HTTP, and the page once in a real
headless Chromium: what the browser drew (a screenshot) and built (its DOM)."""

import os
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from apiserver import TOKEN, ApiClient, serving, small_job
from matplotlib.image import imread

from kuberl_api.page import jobs_table, without_paths
from kuberl_api.sessions import SESSION_COOKIE
from kuberl_contract.plots import (
    DPI,
    FIGURE_INCHES,
    X_LABEL,
    Y_LABEL,
    Curve,
    compact_number,
    draw,
)
from kuberl_operator.spec import RLJob
from testkit import edited, wait_until

SVG = "{http://www.w3.org/2000/svg}"
PLOT_SIZE = tuple(round(inches * DPI) for inches in FIGURE_INCHES)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
WINDOW = (1200, 900)


HERE = Path(__file__).resolve().parent
# Where trainers find this directory's test envs (`failing_env:FailsWhileTraining`).
TEST_ENVS_PATH = os.pathsep.join(part for part in (str(HERE), os.environ.get("PYTHONPATH")) if part)


@pytest.fixture(scope="module")
def open_api(tmp_path_factory):
    """A local backend without tokens (so loopback only), where a browser needs no login."""
    data_dir = tmp_path_factory.mktemp("api") / "data"
    env = {"KUBERL_API_TOKEN": "", "PYTHONPATH": TEST_ENVS_PATH}
    with serving(data_dir, "--max-running", "2", env=env) as server:
        yield server


@pytest.fixture(scope="module")
def trained(open_api):
    """A job trained to its end (5 iterations of 128 env steps)."""
    client = ApiClient(open_api.url)
    assert client.submit(small_job("curve", iterations=5, team="rl")).status_code == 201
    client.wait_phase("curve", "Succeeded")
    return client


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", data[:16]
    return struct.unpack(">II", data[16:24])


def svg_texts(data: bytes) -> list[str]:
    return ["".join(element.itertext()) for element in ET.fromstring(data).iter(SVG + "text")]


def test_plot_of_a_trained_job(trained):
    response = trained.request("GET", trained.jobs(name="curve", action="plot"))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "image/png"
    assert png_size(response.content) == PLOT_SIZE

    response = trained.request("GET", trained.jobs(name="curve", action="plot") + "?format=svg")
    assert response.status_code == 200 and response.headers["content-type"] == "image/svg+xml"
    texts = svg_texts(response.content)
    assert {X_LABEL, Y_LABEL} <= set(texts) and texts.count("curve") == 2  # title and legend
    ticks = [int(text) for text in texts if text.isdigit()]
    # 5 iterations of 128 env steps, less the steps that only reset an env: about 600
    assert min(ticks) <= 128 and max(ticks) >= 500


def test_plot_errors(trained):
    response = trained.request("GET", trained.jobs(name="nobody", action="plot"))
    assert response.status_code == 404 and response.json()["reason"] == "NotFound"
    response = trained.request("GET", trained.jobs(name="curve", action="plot") + "?format=jpg")
    assert response.status_code == 400
    assert response.json()["details"]["causes"][0]["field"] == "format"


def test_the_page_lists_jobs_with_their_plots(trained):
    response = trained.request("GET", "/")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    assert "script-src" not in response.headers["content-security-policy"]  # no script at all
    row = re.search(r'<tr id="job-curve">(.*?)</tr>', response.text).group(1)
    assert "Succeeded" in row and "PPO" in row and "team=rl" in row
    progress = RLJob.model_validate(trained.job("curve")).status.progress
    assert progress.iteration == 5
    assert f'<td class="number">5</td><td class="number">{progress.timesteps:,}</td>' in row
    (src,) = re.findall(r'<img src="([^"]+)"', row)
    assert src == "/v1/namespaces/default/jobs/curve/plot?format=png"
    assert png_size(trained.request("GET", src).content) == PLOT_SIZE

    assert "No jobs in namespace elsewhere" in trained.request("GET", "/?namespace=elsewhere").text
    assert trained.request("GET", "/?namespace=Not_A_Namespace").status_code == 400


@pytest.fixture(scope="module")
def exported(trained):
    """A job trained to its end that exported its policy."""
    job = edited(
        small_job("exported", iterations=1), **{"spec.trainer.checkpoint.exportPolicy": True}
    )
    assert trained.submit(job).status_code == 201
    trained.wait_phase("exported", "Succeeded")
    return trained


def job_links(client: ApiClient, name: str) -> dict[str, str]:
    """The links of the job's row on the page, by their text."""
    row = re.search(rf'<tr id="job-{name}">(.*?)</tr>', client.request("GET", "/").text).group(1)
    return {text: href for href, text in re.findall(r'<a href="([^"]+)"[^>]*>([^<]+)</a>', row)}


def test_each_job_links_to_its_details_logs_and_exported_policy(exported):
    client = exported
    links = job_links(client, "exported")
    assert set(links) == {"details", "logs", "policy"}

    details = client.request("GET", links["details"])
    assert details.status_code == 200 and details.json()["metadata"]["name"] == "exported"
    logs = client.request("GET", links["logs"])
    assert logs.status_code == 200 and logs.headers["content-type"].startswith("text/plain")
    assert logs.text.startswith("Training exported: PPO on CartPole-v1")
    policy = client.request("GET", links["policy"])
    assert policy.status_code == 200 and policy.content  # an ONNX graph, named for the job
    assert policy.headers["content-disposition"] == 'attachment; filename="exported.onnx"'


def test_a_job_without_an_exported_policy_links_to_none_and_its_url_is_a_documented_404(trained):
    links = job_links(trained, "curve")  # trained without an export
    assert set(links) == {"details", "logs"}
    for href in links.values():
        assert trained.request("GET", href).status_code == 200, href

    missing = trained.request("GET", trained.jobs(name="curve", action="policy"))
    assert missing.status_code == 404 and "has no exported policy" in missing.json()["message"]


def test_the_axes_carry_labels_with_units_and_compact_readable_ticks():
    curve = Curve("long", timesteps=[0, 5_000, 15_000, 20_000], returns=[9.0, 40.0, 200.0, 500.0])
    svg = draw([curve], "svg", "long")
    texts = svg_texts(svg)

    assert {X_LABEL, Y_LABEL} <= set(texts)
    assert "(timesteps_total)" in X_LABEL and "(reward/episode)" in Y_LABEL
    assert {"0", "5k", "10k", "15k", "20k"} <= set(texts), texts
    assert not any(text.isdigit() and int(text) >= 1000 for text in texts), texts
    sizes = [float(size) for size in re.findall(rb"font-size: ([\d.]+)px", svg)]
    assert sizes and min(sizes) >= 13  # points: at least 9 CSS pixels on the page's half-size image
    assert [compact_number(v) for v in (500, 2_500, 1_200_000, -3_000, 0.5)] == [
        "500",
        "2.5k",
        "1.2M",
        "-3k",
        "0.5",
    ]


def test_a_token_server_asks_the_browser_for_it_once(queue_api):
    anonymous = ApiClient(queue_api.url)
    assert anonymous.submit(small_job("unseen"), "team").status_code == 401
    with_token = ApiClient(queue_api.url, TOKEN)
    assert with_token.submit(small_job("unseen"), "team").status_code == 201

    form = anonymous.request("GET", "/?namespace=team")
    assert form.status_code == 401 and '<form method="post" action="/login">' in form.text
    assert "unseen" not in form.text
    assert anonymous.request("GET", with_token.jobs("team", "unseen", "plot")).status_code == 401

    refused = anonymous.request("POST", "/login", data={"token": "guess", "namespace": "team"})
    assert refused.status_code == 401 and "invalid bearer token" in refused.text
    assert SESSION_COOKIE not in anonymous.http.cookies

    login = anonymous.request(
        "POST", "/login", data={"token": TOKEN, "namespace": "team"}, allow_redirects=False
    )
    assert login.status_code == 303 and login.headers["location"] == "/?namespace=team"
    cookie = login.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert TOKEN.lower() not in cookie  # a session's id, never the token (test_page_session.py)

    page = anonymous.request("GET", "/?namespace=team")
    assert page.status_code == 200 and '<tr id="job-unseen">' in page.text
    # A job without progress yet: its plot says so.
    plot = anonymous.request("GET", with_token.jobs("team", "unseen", "plot") + "?format=svg")
    assert plot.status_code == 200 and "no progress yet" in svg_texts(plot.content)
    # The cookie reads what the page shows and links to, and nothing else: no change rides on it.
    row = re.search(r'<tr id="job-unseen">(.*?)</tr>', page.text).group(1)
    for href in re.findall(r'<a href="([^"]+)"', row):
        assert anonymous.request("GET", href).status_code == 200, href
    assert (
        anonymous.request("GET", with_token.jobs("team", "unseen", "progress")).status_code == 401
    )
    assert anonymous.request("DELETE", with_token.jobs("team", "unseen")).status_code == 401
    suspend = with_token.jobs("team", "unseen", "suspend")
    assert anonymous.request("POST", suspend, json={}).status_code in (401, 403)
    assert anonymous.submit(small_job("forged"), "team").status_code == 401

    assert anonymous.request("POST", "/logout", allow_redirects=False).status_code == 303
    assert SESSION_COOKIE not in anonymous.http.cookies
    assert anonymous.request("GET", "/?namespace=team").status_code == 401


def test_values_are_escaped(queue_client):
    job = edited(small_job("escaped"), **{"spec.trainer.env": "<script>alert('x')</script>"})
    # The local backend makes the env before it takes a job, as `kuberl validate` does...
    refused = queue_client.submit(job, "escaping")
    assert refused.status_code == 422, refused.text
    [cause] = refused.json()["details"]["causes"]
    assert (
        cause["field"] == "spec.trainer.env" and "not a registered gymnasium id" in cause["message"]
    )
    # ...a cluster does not (its driver does), so a page may show any env.
    page = jobs_table("escaping", [job], lambda route, name: f"/{route}/{name}", plots=False)
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page


def test_messages_show_no_server_paths():
    message = "No such file: '/home/alice/.local/share/kuberl/api/jobs/x/run/checkpoint-00000003'"
    assert without_paths(message) == "No such file: '…/checkpoint-00000003'"
    text = 'see https://example.com/a/b/c, s3://bucket/a/b, 1/2/3 and File "/usr/lib/x.py"'
    assert (
        without_paths(text)
        == 'see https://example.com/a/b/c, s3://bucket/a/b, 1/2/3 and File "…/x.py"'
    )


@pytest.fixture(scope="module")
def failed(open_api):
    """A job that failed at its first env step, before any progress, saying where its env's file
    is on the server."""
    client = ApiClient(open_api.url)
    job = edited(
        small_job("broken"),
        **{
            "spec.trainer.env": "failing_env:FailsWhileTraining",
            "spec.trainer.envConfig": {"steps": 0},
        },
    )
    assert client.submit(job, "failing").status_code == 201
    done = wait_phase(client, "failing", "broken", "Failed")
    return client, done


def wait_phase(client: ApiClient, namespace: str, name: str, phase: str) -> dict:
    return wait_until(
        lambda: (job := client.job(name, namespace))["status"]["phase"] == phase and job,
        90,
        f"{namespace}/{name} to reach {phase}",
    )


def test_a_job_that_failed_before_any_progress_has_no_plot_and_no_server_paths(failed):
    client, job = failed
    assert str(HERE) in str(job["status"]["conditions"])  # the message names the env's file
    page = client.request("GET", "/?namespace=failing").text
    row = re.search(r'<tr id="job-broken">(.*?)</tr>', page).group(1)
    assert "Failed" in row and "<img" not in row, row
    assert "none: it ended before its first iteration" in row
    assert "the env broke while training, see …/failing_env.py" in row
    assert str(HERE) not in page


def chromium(*args: str, tmp_path) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic"]
    command += ["--no-first-run", "--disable-background-networking", "--disable-component-update"]
    command += ["--disable-sync", f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_chromium_shows_the_page_and_its_plot(trained, tmp_path):
    if not shutil.which(CHROMIUM):
        pytest.skip("the status page's browser test needs Chromium: apt-get install chromium")
    url = f"{trained.url}/?namespace=default"
    size = f"--window-size={WINDOW[0]},{WINDOW[1]}"

    dom = chromium("--dump-dom", size, url, tmp_path=tmp_path)
    assert dom.returncode == 0, dom.stderr
    assert '<tr id="job-curve">' in dom.stdout and "Succeeded" in dom.stdout
    assert 'src="/v1/namespaces/default/jobs/curve/plot?format=png"' in dom.stdout
    assert 'href="/v1/namespaces/default/jobs/curve/logs"' in dom.stdout

    def plot_fetches() -> float:
        metrics = trained.request("GET", "/metrics").text
        pattern = r'kuberl_api_requests_total\{code="200",method="GET",route="[^"]*/plot"\} (\S+)'
        found = re.search(pattern, metrics)
        return float(found.group(1)) if found else 0.0

    before = plot_fetches()
    screenshot = tmp_path / "page.png"
    shot = chromium(f"--screenshot={screenshot}", size, url, tmp_path=tmp_path)
    assert shot.returncode == 0 and screenshot.exists(), shot.stderr
    assert plot_fetches() > before  # the browser fetched the plot itself

    assert png_size(screenshot.read_bytes()) == WINDOW
    pixels = imread(screenshot)[..., :3]
    # The page fits the window's width: white along the right edge (the body's margin), and no
    # horizontal scrollbar (grey) along the bottom.
    assert (pixels[:, -16:] > 0.98).all(), "the page is cut at the window's right edge"
    assert (pixels[-16:] > 0.98).all(), "a horizontal scrollbar: the page is wider than the window"
    red, green, blue = np.moveaxis(pixels * 255, -1, 0)
    # The curve is matplotlib's first colour (#1f77b4), scaled and smoothed by the browser; the
    # page itself has nothing blue.
    line = (blue - red > 60) & (blue > green)
    assert line.sum() > 300, "the plot's line is not on the screenshot"
    rows, columns = np.nonzero(line)
    assert columns.min() > WINDOW[0] // 3  # where the image is: right of the text columns
    assert columns.max() - columns.min() > 200 and rows.max() - rows.min() > 50
