"""schemathesis against the served /openapi.json, as its command line runs against a deployment:
every check, valid and invalid data, the fuzzing and stateful phases (the coverage phase too
with KUBERL_SCHEMATHESIS_COVERAGE=1), over real HTTP to a real `kuberl serve`, on both backends
(the kubernetes one against the emulated Kubernetes API). Every answer must be one the document
declares (status code, content type, headers, body), no request may crash the server, invalid
data must be refused and valid data accepted.

Examples are random: the seed is printed, and KUBERL_SCHEMATHESIS_SEED=N replays a run. The local
server stores but never runs jobs (--max-running 0), so generated RLJobs that happen to be valid
start no trainer."""

import os
import random
from typing import Any

import pytest
import schemathesis
from apiserver import TOKEN, ApiClient, small_job
from emulated_rbac import answer_reviews
from schemathesis.config import SchemathesisConfig
from schemathesis.config._checks import POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES
from schemathesis.engine import events, from_schema

SEED_VARIABLE = "KUBERL_SCHEMATHESIS_SEED"

MAX_EXAMPLES = 40
"""Fuzzed examples per operation and mode, and stateful scenarios: about 25 s a backend on an idle
2-core machine."""

REQUEST_TIMEOUT_S = 20

COVERAGE_PHASE = os.environ.get("KUBERL_SCHEMATHESIS_COVERAGE") == "1"
"""The coverage phase sends ~550 boundary cases per backend whatever MAX_EXAMPLES is, most of them
submissions the local backend checks by making their env in a process of its own: minutes on a
2-core machine. The suite runs the fuzzing and stateful phases, which reach every operation in both
modes; KUBERL_SCHEMATHESIS_COVERAGE=1 adds the coverage phase (a deeper run, as the command line in
docs/guides/api.md makes against a deployment)."""

REFUSED_THOUGH_VALID = {
    # A label selector has a grammar, and `continue` must be a token of an earlier list: both
    # are strings to the schema, 400 when they do not parse.
    "GET /v1/jobs": ["400"],
    "GET /v1/namespaces/{namespace}/jobs": ["400"],
    # The RLJob contract has rules no JSON Schema states (a name Ray can use, at least one stop
    # condition, hyperparameters per algorithm, the URL's namespace): 422 naming each field.
    "POST /v1/namespaces/{namespace}/jobs": ["422"],
    # A count outside the job's minReplicas and maxReplicas.
    "PUT /v1/namespaces/{namespace}/jobs/{name}/scale": ["422"],
    # purge=true where the backend keeps no files of a job (kubernetes).
    "DELETE /v1/namespaces/{namespace}/jobs/{name}": ["400"],
}
"""Schema-valid requests the API refuses all the same, as the operation's description says: the
codes the positive_data_acceptance check accepts from these operations besides its defaults."""


def schemathesis_seed() -> int:
    """KUBERL_SCHEMATHESIS_SEED when set (to replay a run), else a fresh random seed."""
    return int(os.environ.get(SEED_VARIABLE) or random.randrange(2**32))


def contract_violations(
    url: str, token: str, seed: int, path_parameters: dict[str, str] | None = None
) -> list[str]:
    """Runs schemathesis' full engine against the API at `url` with `token`: one entry per
    distinct failure (operation, failure code, what was wrong, a curl command reproducing it)."""
    config = SchemathesisConfig.from_dict(
        {
            "seed": seed,
            "workers": 1,
            # A request left unanswered is then a reported failure, not a stalled run.
            "request-timeout": REQUEST_TIMEOUT_S,
            "headers": {"Authorization": f"Bearer {token}"},
            "generation": {"mode": "all", "max-examples": MAX_EXAMPLES},
            "phases": {"coverage": {"enabled": COVERAGE_PHASE}},
            "parameters": path_parameters or {},
            "operations": [
                {
                    "include-name": operation,
                    "checks": {
                        "positive_data_acceptance": {
                            "expected-statuses": POSITIVE_DATA_ACCEPTANCE_EXPECTED_STATUSES + codes
                        }
                    },
                }
                for operation, codes in REFUSED_THOUGH_VALID.items()
            ],
        }
    )
    schema = schemathesis.openapi.from_url(url + "/openapi.json", config=config)
    violations: dict[tuple[Any, ...], str] = {}
    for event in from_schema(schema).execute():
        if isinstance(event, events.FatalError):
            raise AssertionError("schemathesis stopped") from event.exception
        if isinstance(event, events.NonFatalError):  # an operation it could not test
            violations[(event.label, repr(event.value))] = f"{event.label}: {event.value!r}"
        if isinstance(event, events.ScenarioFinished):
            for checks in event.recorder.checks.values():
                for check in checks:
                    if (info := check.failure_info) is not None:
                        failure = info.failure
                        key = (failure.operation, failure.code, failure.title)
                        violations.setdefault(
                            key,
                            f"{failure.operation}: {failure.code} {failure.title}\n"
                            f"{failure.message}\n{info.code_sample}",
                        )
    return list(violations.values())


def assert_keeps_its_contract(url: str, token: str, **kwargs: Any) -> None:
    seed = schemathesis_seed()
    print(f"schemathesis seed {seed} (replay with {SEED_VARIABLE}={seed})")
    violations = contract_violations(url, token, seed, **kwargs)
    assert not violations, f"seed {seed} ({SEED_VARIABLE}={seed} replays it):\n\n" + "\n\n".join(
        violations
    )


@pytest.fixture
def cluster(kube_api):
    """The emulated Kubernetes API with the RLJob CRD and its token and access reviews."""
    kube_api.register_crd()
    kube_api.reviews = answer_reviews(kube_api)
    return kube_api


@pytest.mark.timeout(300)
def test_the_local_backend_keeps_its_contract(queue_api):
    assert_keeps_its_contract(queue_api.url, TOKEN)


@pytest.mark.timeout(300)
def test_the_kubernetes_backend_keeps_its_contract(api, cluster):
    # alice may do everything with rljobs in team-a only (emulated_rbac): requests there reach
    # the backend, where random namespaces would all end in a 403.
    assert_keeps_its_contract(api.url, "alice-token", path_parameters={"namespace": "team-a"})


@pytest.mark.timeout(60)
def test_the_same_without_a_token(queue_api):
    """Every job route declares its 401, with a Status body."""
    loaded = schemathesis.openapi.from_url(queue_api.url + "/openapi.json")
    anonymous = ApiClient(queue_api.url)
    for path, operations in loaded.raw_schema["paths"].items():
        if not path.startswith("/v1/"):
            continue
        concrete = path.replace("{namespace}", "default").replace("{name}", "some-job")
        for method, operation in operations.items():
            assert "401" in operation["responses"], (method, path)
            response = anonymous.request(method.upper(), concrete)
            assert response.status_code == 401, (method, path)
            assert response.json()["reason"] == "Unauthorized"


@pytest.mark.timeout(60)
def test_successful_answers_match_too(queue_api):
    """Random names rarely exist, so the happy paths are walked explicitly on a stored job."""
    schema = schemathesis.openapi.from_url(queue_api.url + "/openapi.json")
    job = small_job("conformance", team="rl")
    where = {"namespace": "conformance", "name": "conformance"}
    steps = [
        (
            "/v1/namespaces/{namespace}/jobs",
            "POST",
            {"body": job, "media_type": "application/json"},
        ),
        ("/v1/namespaces/{namespace}/jobs", "GET", {"query": {"labelSelector": "team=rl"}}),
        ("/v1/jobs", "GET", {"query": {"labelSelector": "team=rl", "limit": 1}}),
        ("/v1/namespaces/{namespace}/jobs/{name}", "GET", {}),
        ("/v1/namespaces/{namespace}/jobs/{name}/progress", "GET", {}),
        ("/v1/namespaces/{namespace}/jobs/{name}/logs", "GET", {}),
        ("/v1/namespaces/{namespace}/jobs/{name}/plot", "GET", {"query": {"format": "svg"}}),
        ("/v1/namespaces/{namespace}/jobs/{name}/plot", "GET", {}),
        ("/", "GET", {"query": {"namespace": "conformance"}}),
        ("/v1/namespaces/{namespace}/jobs/{name}/scale", "GET", {}),
        (
            "/v1/namespaces/{namespace}/jobs/{name}/scale",
            "PUT",
            {"body": {"workers": 1}, "media_type": "application/json"},
        ),
        ("/v1/namespaces/{namespace}/jobs/{name}/suspend", "POST", {}),
        ("/v1/namespaces/{namespace}/jobs/{name}/resume", "POST", {}),
        ("/v1/namespaces/{namespace}/jobs/{name}", "DELETE", {}),
        ("/metrics", "GET", {}),
    ]
    for path, method, extra in steps:
        parameters = {k: v for k, v in where.items() if "{" + k + "}" in path}
        case = schema[path][method].Case(path_parameters=parameters, **extra)
        response = case.call_and_validate(
            base_url=queue_api.url, headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert response.status_code < 300, (method, path, response.text)
