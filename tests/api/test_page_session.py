"""The status page's session over real HTTP: the cookie holds a random session id, never the token;
the id reads the page and the plot until logout ends it on the server; it is `Secure` over HTTPS,
which a proxy can say (X-Forwarded-Proto) only from an address in --forwarded-allow-ips, and always
with --secure-cookies. And the session store's lifetime and bound, on a clock of the test's."""

from http.cookies import Morsel, SimpleCookie

import pytest
import requests
from apiserver import TOKEN, ApiClient, ApiServer, serving, small_job

from kuberl_api.sessions import SESSION_COOKIE, PageSessions
from testkit import free_port, run_kuberl

pytestmark = pytest.mark.timeout(120)

NAMESPACE = "sessions"
HTTPS_PROXY = {"X-Forwarded-Proto": "https"}
UNLISTED_PROXY = "192.0.2.1"  # TEST-NET-1: never the address the tests connect from


def token_server(tmp_path_factory, *args: str):
    """A token-protected local backend that starts no trainer, with `args` added."""
    data_dir = tmp_path_factory.mktemp("api") / "data"
    return serving(data_dir, "--max-running", "0", *args, env={"KUBERL_API_TOKEN": TOKEN})


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    """Proxies on loopback are trusted, as by default."""
    with token_server(tmp_path_factory) as server:
        yield server


def log_in(server: ApiServer, headers: dict[str, str] | None = None) -> Morsel:
    """The session cookie the login form's answer sets (checked to hold nothing of the token)."""
    response = ApiClient(server.url).request(
        "POST",
        "/login",
        data={"token": TOKEN, "namespace": NAMESPACE},
        headers=headers or {},
        allow_redirects=False,
    )
    assert response.status_code == 303, response.text
    header = response.headers["set-cookie"]
    assert TOKEN not in header
    return SimpleCookie(header)[SESSION_COOKIE]


def with_cookie(server: ApiServer, path: str, session_id: str) -> requests.Response:
    """GET `path` sending the session cookie by hand (a client's jar keeps a Secure cookie off
    plain HTTP, as a browser would)."""
    cookie = {"Cookie": f"{SESSION_COOKIE}={session_id}"}
    return requests.get(server.url + path, headers=cookie, timeout=30, allow_redirects=False)


def test_the_cookie_holds_a_session_id_that_reads_the_page_and_plot_until_logout(api):
    client = ApiClient(api.url, TOKEN)
    assert client.submit(small_job("watched"), NAMESPACE).status_code == 201
    page, plot = f"/?namespace={NAMESPACE}", client.jobs(NAMESPACE, "watched", "plot")

    cookie = log_in(api)
    assert cookie.value != TOKEN and len(cookie.value) >= 32
    assert cookie["httponly"] and cookie["samesite"].lower() == "strict"
    assert not cookie["secure"]  # plain HTTP, no proxy said otherwise
    assert log_in(api).value != cookie.value  # each login its own random id

    shown = with_cookie(api, page, cookie.value)
    assert shown.status_code == 200 and '<tr id="job-watched">' in shown.text
    assert 'action="/logout"' in shown.text  # the form that ends the session
    assert with_cookie(api, plot + "?format=svg", cookie.value).status_code == 200
    # Only the page and the GETs it shows or links to take it (the job's details here, not its
    # progress); and the token itself is no cookie.
    assert with_cookie(api, client.jobs(NAMESPACE, "watched"), cookie.value).status_code == 200
    progress = client.jobs(NAMESPACE, "watched", "progress")
    assert with_cookie(api, progress, cookie.value).status_code == 401
    assert with_cookie(api, page, TOKEN).status_code == 401
    assert with_cookie(api, page, "made-up-session-id").status_code == 401

    logout = requests.post(
        api.url + "/logout",
        headers={"Cookie": f"{SESSION_COOKIE}={cookie.value}"},
        timeout=30,
        allow_redirects=False,
    )
    assert logout.status_code == 303
    assert SimpleCookie(logout.headers["set-cookie"])[SESSION_COOKIE].value == ""
    # Ended on the server: a copy of the cookie kept elsewhere reads nothing any more.
    replayed = with_cookie(api, page, cookie.value)
    assert replayed.status_code == 401 and 'action="/login"' in replayed.text
    assert with_cookie(api, plot, cookie.value).status_code == 401


def test_x_forwarded_proto_makes_the_cookie_secure_only_from_a_listed_proxy(api, tmp_path_factory):
    assert log_in(api, HTTPS_PROXY)["secure"]  # loopback is a listed proxy by default
    with token_server(tmp_path_factory, "--forwarded-allow-ips", UNLISTED_PROXY) as other:
        assert not log_in(other, HTTPS_PROXY)["secure"]  # a client saying so is not a proxy


def test_secure_cookies_marks_the_cookie_secure_whatever_the_request_says(tmp_path_factory):
    with token_server(tmp_path_factory, "--secure-cookies") as server:
        cookie = log_in(server)
        assert cookie["secure"]
        assert with_cookie(server, f"/?namespace={NAMESPACE}", cookie.value).status_code == 200


def test_a_forwarded_allow_ips_that_is_no_address_stops_serve_with_the_reason(tmp_path):
    out = run_kuberl(
        *("serve", "--port", free_port(), "--data-dir", tmp_path / "data"),
        *("--forwarded-allow-ips", "127.0.0.1,proxy.example"),
        timeout=60,
    )
    assert out.returncode == 1
    assert (
        "kuberl serve: --forwarded-allow-ips: 'proxy.example' is not an IP address or network"
        in out.stderr
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_ends_at_logout_or_after_its_lifetime():
    clock = Clock()
    sessions = PageSessions(lifetime_seconds=60, clock=clock)
    first, second = sessions.open("token-1"), sessions.open("token-2")
    assert first != second and "token" not in first
    assert sessions.token(first) == "token-1" and sessions.token(second) == "token-2"
    sessions.close(first)
    assert sessions.token(first) is None and sessions.token(second) == "token-2"
    clock.now += 59.9
    assert sessions.token(second) == "token-2"
    clock.now += 0.1
    assert sessions.token(second) is None
    assert sessions.token(None) is None and sessions.token("unknown") is None
    assert len(sessions) == 0


def test_sessions_are_bounded_the_oldest_dropped_first():
    clock = Clock()
    sessions = PageSessions(lifetime_seconds=60, limit=3, clock=clock)
    opened = [sessions.open(f"token-{i}") for i in range(3)]
    clock.now += 30
    newest = sessions.open("token-3")
    assert len(sessions) == 3
    assert sessions.token(opened[0]) is None  # dropped to make room
    assert [sessions.token(i) for i in (*opened[1:], newest)] == ["token-1", "token-2", "token-3"]
    clock.now += 31  # the first three have expired: a login clears them out
    sessions.open("token-4")
    assert len(sessions) == 2
