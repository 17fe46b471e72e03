"""What a web page could forge, refused over real HTTP: changes from another site's page, bodies
without a manifest's media type, Host names other than loopback on a server without tokens, bodies
over the limit; and /metrics naming jobs only to those who may list them."""

import http.client
import json
from urllib.parse import urlsplit

import pytest
from apiserver import TOKEN, ApiClient, small_job

from kuberl_api.sessions import SESSION_COOKIE
from kuberl_api.submission import JSON_TYPES, MAX_BODY_BYTES, YAML_TYPES

pytestmark = pytest.mark.timeout(120)

EVIL = "https://evil.example"
JOB_SERIES = (
    "kuberl_jobs{",
    "kuberl_api_job_episode_return_mean{",
    "kuberl_api_job_timesteps{",
)


def test_a_submission_without_a_content_type_is_415_and_stores_nothing(queue_client):
    body = json.dumps(small_job("untyped")).encode()  # as `fetch(url, {body: new Blob([json])})`
    response = queue_client.request("POST", queue_client.jobs("guarded"), data=body)
    assert response.status_code == 415, response.text
    message = response.json()["message"]
    assert message.startswith("Content-Type (none) is not one of")
    assert all(media in message for media in JSON_TYPES | YAML_TYPES)
    assert queue_client.request("GET", queue_client.jobs("guarded", "untyped")).status_code == 404


def test_changes_from_another_sites_page_are_403_and_change_nothing(queue_client):
    assert queue_client.submit(small_job("running"), "forged").status_code == 201
    paused = small_job("paused")
    paused["spec"]["suspend"] = True
    assert queue_client.submit(paused, "forged").status_code == 201
    before = [queue_client.job(name, "forged") for name in ("running", "paused")]

    attempts = [
        ("POST", queue_client.jobs("forged"), {"json": small_job("planted")}),
        ("POST", queue_client.jobs("forged", "running", "suspend"), {}),
        ("POST", queue_client.jobs("forged", "paused", "resume"), {}),
        ("DELETE", queue_client.jobs("forged", "running"), {}),
        ("POST", "/login", {"data": {"token": TOKEN, "namespace": "forged"}}),
        ("POST", "/logout", {}),
    ]
    for headers in (
        {"Origin": EVIL},
        {"Origin": "null"},  # a sandboxed frame or a local file
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},  # another port or subdomain is another site's code
    ):
        for method, path, extra in attempts:
            response = queue_client.request(
                method, path, headers=headers, allow_redirects=False, **extra
            )
            assert response.status_code == 403, (headers, method, path, response.text)
            body = response.json()
            assert body["reason"] == "Forbidden"
            [(name, value)] = headers.items()
            assert f"({name}: {value})" in body["message"]
            assert SESSION_COOKIE not in response.cookies

    assert [queue_client.job(name, "forged") for name in ("running", "paused")] == before
    assert queue_client.request("GET", queue_client.jobs("forged", "planted")).status_code == 404


def test_changes_from_the_servers_own_pages_and_from_clients_pass(queue_client, queue_api):
    own = {"Origin": queue_api.url, "Sec-Fetch-Site": "same-origin"}
    assert queue_client.submit(small_job("mine"), "own").status_code == 201
    suspend = queue_client.jobs("own", "mine", "suspend")
    assert queue_client.request("POST", suspend, headers=own).status_code == 200
    typed = {"Sec-Fetch-Site": "none"}  # typed into the address bar, a bookmark
    resume = queue_client.jobs("own", "mine", "resume")
    assert queue_client.request("POST", resume, headers=typed).status_code == 200
    login = ApiClient(queue_api.url).request(
        "POST",
        "/login",
        data={"token": TOKEN, "namespace": "own"},
        headers=own,
        allow_redirects=False,
    )
    assert login.status_code == 303, login.text
    assert queue_client.request("DELETE", queue_client.jobs("own", "mine")).status_code == 200


def test_bodyless_changes_refuse_a_content_type(queue_client):
    assert queue_client.submit(small_job("bodyless"), "bodyless").status_code == 201
    for media_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        forged = {"Content-Type": media_type}  # what a page's form or fetch would send
        for method, action in (("POST", "suspend"), ("POST", "resume"), ("DELETE", "")):
            path = queue_client.jobs("bodyless", "bodyless", action)
            response = queue_client.request(method, path, data="x", headers=forged)
            assert response.status_code == 415, (media_type, method, action)
            assert "takes no body" in response.json()["message"]
    assert not queue_client.job("bodyless", "bodyless")["spec"].get("suspend")
    # A type a page cannot send without asking first: a client's habit, served.
    json_type = {"Content-Type": "application/json"}
    path = queue_client.jobs("bodyless", "bodyless", "suspend")
    assert queue_client.request("POST", path, headers=json_type).status_code == 200


def test_without_tokens_only_loopback_hosts_are_served(open_queue_api):
    client, port = ApiClient(open_queue_api.url), open_queue_api.port
    for host in ("evil.example", f"evil.example:{port}", f"192.168.1.5:{port}", "localhost.evil"):
        for method, path in (("GET", client.jobs()), ("GET", "/metrics"), ("GET", "/")):
            response = client.request(method, path, headers={"Host": host})
            assert response.status_code == 421, (host, path)
            body = response.json()
            assert body["reason"] == "MisdirectedRequest" and repr(host) in body["message"]
        response = client.request(
            "POST", client.jobs(), json=small_job("rebound"), headers={"Host": host}
        )
        assert response.status_code == 421
    assert client.request("GET", client.jobs(name="rebound")).status_code == 404

    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost", f"127.0.0.2:{port}"):
        response = client.request("GET", client.jobs(), headers={"Host": host})
        assert response.status_code == 200, (host, response.text)
    # An IPv6 literal in brackets; the server listens on IPv4, so the name is only the header's.
    assert client.request("GET", "/healthz", headers={"Host": f"[::1]:{port}"}).text == "ok"


def test_with_tokens_every_host_is_served(queue_client):
    named = {"Host": "kuberl.example"}
    assert queue_client.request("GET", queue_client.jobs(), headers=named).status_code == 200
    # Behind a proxy that ends TLS: the browser's origin is https, the API sees plain http.
    own_page = named | {"Origin": "https://kuberl.example"}
    response = queue_client.request(
        "POST", queue_client.jobs("proxied"), json=small_job("proxied"), headers=own_page
    )
    assert response.status_code == 201, response.text


def test_a_body_over_the_limit_is_413_before_it_is_read(queue_api):
    connection = post_headers(queue_api, {"Content-Length": str(MAX_BODY_BYTES + 1)})
    response = connection.getresponse()  # no byte of the body was sent: it is not waited for
    assert response.status == 413
    assert json.loads(response.read())["message"] == (
        f"Content-Length {MAX_BODY_BYTES + 1} is over the limit of {MAX_BODY_BYTES} bytes: "
        "send a smaller body"
    )


def test_a_chunked_body_is_refused_once_it_passes_the_limit(queue_api):
    connection = post_headers(queue_api, {"Transfer-Encoding": "chunked"})
    piece = b" " * 65536
    for _ in range(MAX_BODY_BYTES // len(piece) + 1):
        connection.send(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
    # The body never ends (no last chunk): the answer comes once the limit is passed.
    response = connection.getresponse()
    assert response.status == 413
    assert "the body is over the limit" in json.loads(response.read())["message"]


def post_headers(server, headers: dict[str, str]) -> http.client.HTTPConnection:
    """A connection that has sent a job submission's headers and nothing more."""
    url = urlsplit(server.url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    connection.putrequest("POST", "/v1/namespaces/large/jobs")
    for name, value in (
        {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"} | headers
    ).items():
        connection.putheader(name, value)
    connection.endheaders()
    return connection


def test_metrics_name_jobs_only_to_a_token_holder(queue_client, queue_api):
    assert queue_client.submit(small_job("metered"), "metered").status_code == 201
    for anonymous in (ApiClient(queue_api.url), ApiClient(queue_api.url, "not-the-token")):
        response = anonymous.request("GET", "/metrics")
        assert response.status_code == 200
        assert "kuberl_api_requests_total{" in response.text
        assert "kuberl_api_request_duration_seconds_bucket{" in response.text
        assert not [series for series in JOB_SERIES if series in response.text]
        assert "metered" not in response.text

    text = queue_client.request("GET", "/metrics").text
    assert 'kuberl_jobs{namespace="metered",phase="Pending"} 1.0' in text
    assert (
        'kuberl_api_job_timesteps{algorithm="PPO",namespace="metered",phase="Pending",'
        'rljob="metered"} 0.0'
    ) in text
