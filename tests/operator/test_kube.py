"""The Kubernetes client of the operator and the API (kuberl_operator.kube) over real HTTP: its
config loader against kubeconfigs as kubectl writes them, served by a real TLS server on loopback,
and its error mapping against the emulated Kubernetes API."""

import asyncio
import base64
import contextlib
import shutil
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from kuberl_operator.kube import (
    Kube,
    KubeConfig,
    KubeConfigError,
    KubeError,
    in_cluster_config,
    load_kube_config,
    path,
)
from testkit import free_port, rljob

pytestmark = pytest.mark.timeout(60)

CLIENT_NAME = "kuberl-test-client"


def kubeconfig(file: Path, cluster: dict[str, Any], user: dict[str, Any] | None = None) -> Path:
    """A kubeconfig with one context, as `kubectl config` writes it."""
    context = {"cluster": "test", **({"user": "tester"} if user is not None else {})}
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": cluster}],
        "users": [{"name": "tester", "user": user}] if user is not None else [],
        "contexts": [{"name": "test", "context": context}],
        "current-context": "test",
    }
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(yaml.safe_dump(document))
    return file


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def run(coroutine_fn: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(coroutine_fn())


# --- A tiny API server on loopback -------------------------------------------------------------


async def echo(request: web.Request) -> web.Response:
    """Who called, as the server saw it: the bearer token and the client certificate's name."""
    peer = request.transport.get_extra_info("peercert") if request.transport else None
    subject = dict(pair[0] for pair in (peer or {}).get("subject", ()))
    return web.json_response(
        {"authorization": request.headers.get("Authorization"), "client": subject.get("commonName")}
    )


async def not_kubernetes(request: web.Request) -> web.Response:
    """A proxy's answers: a plain-text error, and a page that is not JSON."""
    if request.query.get("fail"):
        return web.Response(status=502, text="upstream connect error")
    return web.Response(text="<html>sign in</html>", content_type="text/html")


@contextlib.asynccontextmanager
async def tiny_server(tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/echo", echo)
    app.router.add_get("/proxy", not_kubernetes)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls).start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def call(config: KubeConfig, url_path: str = "/echo", **options: Any) -> dict[str, Any]:
    kube = Kube(config, **options)
    try:
        return await kube.request("GET", url_path)
    finally:
        await kube.close()


# --- Certificates made with openssl ------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by it."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the TLS tests need the openssl command: not installed")
    folder = tmp_path_factory.mktemp("pki")

    def sh(command: str) -> None:
        subprocess.run([openssl, *command.split()], cwd=folder, check=True, capture_output=True)

    new_key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
    sh(f"req -x509 {new_key} -keyout ca.key -out ca.crt -subj /CN=test-ca")
    for name, subject, extension in (
        ("server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1"),
        ("client", f"/CN={CLIENT_NAME}", "extendedKeyUsage=clientAuth"),
    ):
        (folder / f"{name}.ext").write_text(extension + "\n")
        sh(f"req -new {new_key} -keyout {name}.key -out {name}.csr -subj {subject}")
        sh(
            f"x509 -req -in {name}.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out {name}.crt "
            f"-extfile {name}.ext"
        )
    return folder


@pytest.fixture(scope="module")
def server_tls(pki) -> ssl.SSLContext:
    """The tiny server's TLS: its certificate, and client certificates checked against the CA."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=pki / "ca.crt")
    context.load_cert_chain(pki / "server.crt", pki / "server.key")
    context.verify_mode = ssl.CERT_OPTIONAL
    return context


# --- The config loader ---------------------------------------------------------------------------


def test_a_token_and_an_explicit_server(tmp_path):
    file = kubeconfig(tmp_path / "config", {"server": "https://kube.example:6443"}, {"token": "t"})
    config = load_kube_config(kubeconfig=file)
    assert (config.server, config.token, config.token_file) == (
        "https://kube.example:6443",
        "t",
        None,
    )
    assert not config.insecure and config.ca_pem is None
    moved = load_kube_config(kubeconfig=file, server="http://127.0.0.1:1")
    assert (moved.server, moved.token) == ("http://127.0.0.1:1", "t")
    assert load_kube_config(server="http://127.0.0.1:2") == KubeConfig("http://127.0.0.1:2")


def test_the_token_is_sent_and_a_token_file_is_read_again(tmp_path):
    token = tmp_path / "folder" / "token"
    token.parent.mkdir()
    token.write_text("first\n")

    async def scenario() -> list[str | None]:
        async with tiny_server() as url:
            inline = load_kube_config(kubeconfig(tmp_path / "a", {"server": url}, {"token": "t"}))
            # tokenFile is relative to the kubeconfig's folder, as kubectl reads it.
            config = load_kube_config(
                kubeconfig(tmp_path / "folder" / "b", {"server": url}, {"tokenFile": "token"})
            )
            assert config.token_file == token
            kubes = [Kube(inline), Kube(config), Kube(config, token_reread_s=0)]
            try:
                seen = [(await kube.request("GET", "/echo"))["authorization"] for kube in kubes]
                token.write_text("rotated\n")  # as the kubelet rotates a bound token
                seen += [(await kube.request("GET", "/echo"))["authorization"] for kube in kubes]
                return seen
            finally:
                for kube in kubes:
                    await kube.close()

    # The second client keeps its copy for a while; the third reads the file at every request.
    assert run(scenario) == [
        *("Bearer t", "Bearer first", "Bearer first"),
        *("Bearer t", "Bearer first", "Bearer rotated"),
    ]


def test_client_certificate_data_and_a_relative_ca_file_over_tls(tmp_path, pki, server_tls):
    (tmp_path / "pki").symlink_to(pki)

    async def scenario() -> dict[str, Any]:
        async with tiny_server(server_tls) as url:
            user = {
                "client-certificate-data": b64((pki / "client.crt").read_bytes()),
                "client-key-data": b64((pki / "client.key").read_bytes()),
            }
            cluster = {"server": url, "certificate-authority": "pki/ca.crt"}
            return await call(load_kube_config(kubeconfig(tmp_path / "config", cluster, user)))

    assert run(scenario) == {"authorization": None, "client": CLIENT_NAME}


def test_client_certificate_files_and_ca_data(tmp_path, pki, server_tls):
    async def scenario() -> dict[str, Any]:
        async with tiny_server(server_tls) as url:
            user = {
                "client-certificate": str(pki / "client.crt"),
                "client-key": str(pki / "client.key"),
                "token": "both",
            }
            cluster = {
                "server": url,
                "certificate-authority-data": b64((pki / "ca.crt").read_bytes()),
            }
            return await call(load_kube_config(kubeconfig(tmp_path / "config", cluster, user)))

    assert run(scenario) == {"authorization": "Bearer both", "client": CLIENT_NAME}


def test_an_unknown_server_certificate_is_refused_unless_insecure(tmp_path, server_tls):
    async def scenario() -> tuple[KubeError, dict[str, Any]]:
        async with tiny_server(server_tls) as url:
            verified = load_kube_config(kubeconfig(tmp_path / "a", {"server": url}, {}))
            with pytest.raises(KubeError) as refused:
                await call(verified)
            cluster = {"server": url, "insecure-skip-tls-verify": True}
            return refused.value, await call(
                load_kube_config(kubeconfig(tmp_path / "b", cluster, {}))
            )

    refused, answer = run(scenario)
    assert refused.status == 0 and "certificate verify failed" in refused.message
    assert answer == {"authorization": None, "client": None}


def test_in_cluster_the_service_account(tmp_path, monkeypatch, pki):
    (tmp_path / "token").write_text("sa-token")
    shutil.copy(pki / "ca.crt", tmp_path / "ca.crt")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    config = in_cluster_config(tmp_path)
    assert config.server == "https://[fd00::1]:443"
    assert config.token_file == tmp_path / "token" and config.token is None
    assert config.ca_pem == (pki / "ca.crt").read_bytes()


def test_without_any_configuration_the_error_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(KubeConfigError, match=r"no kubeconfig at .*absent"):
        load_kube_config()
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "absent", {"server": "http://x"})))
    assert load_kube_config().server == "http://x"


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda d: d.pop("current-context"), r"config: no current-context; choose one with"),
        (lambda d: d.update({"current-context": "prod"}), r"contexts has no entry named 'prod'"),
        (lambda d: d["clusters"][0]["cluster"].pop("server"), r"cluster 'test' has no server URL"),
        (
            lambda d: d["users"][0]["user"].update(exec={"command": "aws"}),
            r"user 'tester' authenticates with an exec plugin, which kuberl does not run; give it "
            r"a token",
        ),
        (
            lambda d: d["users"][0]["user"].update({"auth-provider": {"name": "gcp"}}),
            r"authenticates with an auth-provider plugin",
        ),
        (
            lambda d: d["users"][0]["user"].update(username="admin", password="x"),
            r"basic authentication, which Kubernetes removed",
        ),
        (
            lambda d: d["clusters"][0]["cluster"].update({"certificate-authority": "ca.pem"}),
            r"clusters\['test'\]\.certificate-authority: cannot read .*ca\.pem: No such file",
        ),
        (
            lambda d: d["clusters"][0]["cluster"].update({"certificate-authority-data": "@@"}),
            r"clusters\['test'\]\.certificate-authority-data: not base64",
        ),
        (
            lambda d: d["users"][0]["user"].update({"client-certificate-data": "Y2VydA=="}),
            r"needs both client-certificate and client-key",
        ),
        (
            lambda d: d["clusters"][0]["cluster"].update({"certificate-authority-data": "Y2E="}),
            r"config: the certificate authority is not PEM",
        ),
        (
            lambda d: d["users"][0]["user"].update(
                {"client-certificate-data": "Y2VydA==", "client-key-data": "a2V5"}
            ),
            r"config: the client certificate and key are not a PEM pair",
        ),
        (
            lambda d: d["users"][0]["user"].update(tokenFile="missing-token"),
            r"users\['tester'\]\.tokenFile: no file at .*missing-token",
        ),
    ],
)
def test_unusable_kubeconfigs_are_refused_naming_the_file_and_field(tmp_path, edit, expected):
    file = kubeconfig(tmp_path / "config", {"server": "https://kube.example"}, {"token": "t"})
    document = yaml.safe_load(file.read_text())
    edit(document)
    file.write_text(yaml.safe_dump(document))
    with pytest.raises(KubeConfigError, match=expected) as refused:
        load_kube_config(kubeconfig=file)
    assert str(refused.value).startswith(str(file))


def test_a_file_that_is_not_a_kubeconfig(tmp_path):
    for text, expected in (("- a list\n", "not a kubeconfig"), ("a: [", "cannot read")):
        (tmp_path / "config").write_text(text)
        with pytest.raises(KubeConfigError, match=f"config: {expected}"):
            load_kube_config(kubeconfig=tmp_path / "config")


# --- Requests and their errors --------------------------------------------------------------------


def test_verbs_and_kubernetes_errors_against_the_emulated_api(kube_api, tmp_path):
    jobs = path("kuberl.io/v1alpha1", "rljobs", "default")
    job = path("kuberl.io/v1alpha1", "rljobs", "default", "job")
    assert job == kube_api.rljobs(name="job")

    async def scenario() -> None:
        kube = Kube(load_kube_config(kube_api.kubeconfig(tmp_path / "config")))
        try:
            assert not await kube.serves("kuberl.io/v1alpha1", "rljobs")  # no CRD yet
            kube_api.register_crd()
            assert await kube.serves("kuberl.io/v1alpha1", "rljobs")
            assert not await kube.serves("kuberl.io/v1alpha1", "rljobz")

            created = await kube.create(jobs, rljob("job", labels={"team": "rl"}))
            assert created is not None and created["metadata"]["uid"]
            assert await kube.create(jobs, rljob("job")) is None  # 409: it exists
            other = rljob("other")
            assert await kube.create(jobs, other) is not None
            assert [j["metadata"]["name"] for j in await kube.list(jobs, {"team": "rl"})] == ["job"]
            assert len(await kube.list(jobs)) == 2

            patched = await kube.merge_patch(job, {"spec": {"suspend": True}})
            assert patched["spec"]["suspend"] is True
            operations = [{"op": "replace", "path": "/spec/suspend", "value": False}]
            assert (await kube.json_patch(job, operations))["spec"]["suspend"] is False

            assert await kube.delete(job) is True
            assert await kube.delete(job) is False  # 404: already gone
            assert await kube.get(job) is None
            with pytest.raises(KubeError) as missing:
                await kube.request("GET", job)
            error = missing.value
            assert (error.status, error.reason) == (404, "NotFound")
            assert '"job"' in error.message and "not found" in error.message
            with pytest.raises(KubeError) as conflict:
                await kube.request("POST", jobs, other)
            assert (conflict.value.status, conflict.value.reason) == (409, "AlreadyExists")
        finally:
            await kube.close()

    run(scenario)


def test_answers_that_are_not_from_kubernetes():
    async def scenario() -> list[KubeError]:
        errors = []
        async with tiny_server() as url:
            for url_path in ("/proxy?fail=1", "/proxy"):
                with pytest.raises(KubeError) as raised:
                    await call(KubeConfig(url), url_path)
                errors.append(raised.value)
        unreachable = f"http://127.0.0.1:{free_port()}"
        with pytest.raises(KubeError) as raised:
            await call(KubeConfig(unreachable), "/api/v1/pods", timeout_s=5)
        return [*errors, raised.value]

    failed, html, unreachable = run(scenario)
    assert (failed.status, failed.reason, failed.message) == (
        502,
        "Bad Gateway",
        "upstream connect error",
    )
    assert html.status == 0 and "is not Kubernetes" in html.message and "sign in" in html.message
    assert (unreachable.status, unreachable.reason) == (0, "Unreachable")
    assert unreachable.message.startswith("cannot reach Kubernetes at http://127.0.0.1:")
    assert "GET /api/v1/pods" in unreachable.message


def test_the_client_does_not_import_kopf():
    """The API's install has no kopf: its backend and this client must import without it."""
    code = (
        "import sys, kuberl_operator.kube, kuberl_api.kubernetes_backend; "
        "sys.exit('kopf' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
