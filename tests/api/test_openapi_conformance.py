"""schemathesis against the served /openapi.json: generated requests to every operation, over real
HTTP, answered without a 5xx and exactly as the document declares (status codes, content types,
bodies). The server stores but never runs jobs (--max-running 0), so generated RLJobs that happen
to be valid start no trainer; examples are bounded to keep the run well under a minute."""

import pytest
import schemathesis
from apiserver import TOKEN, ApiClient, small_job
from hypothesis import HealthCheck, given, settings
from schemathesis import checks
from schemathesis.specs.openapi import checks as openapi_checks

CHECKS = [
    checks.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_schema_conformance,
]


@pytest.mark.timeout(120)
def test_every_answer_matches_the_openapi_document(queue_api):
    # schemathesis' pytest plugin (from_fixture) does not run under pytest 9, so the operations
    # are walked here, one hypothesis run each.
    schema = schemathesis.openapi.from_url(queue_api.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 11
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=15,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def answers_as_declared(case):
            case.call_and_validate(
                base_url=queue_api.url,
                headers={"Authorization": f"Bearer {TOKEN}"},
                checks=CHECKS,
            )

        answers_as_declared()


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
            base_url=queue_api.url, headers={"Authorization": f"Bearer {TOKEN}"}, checks=CHECKS
        )
        assert response.status_code < 300, (method, path, response.text)
