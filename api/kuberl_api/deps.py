"""What routes take besides their parameters, as `Annotated` dependencies: the app's backend and
metrics, the caller (the bearer token, checked by the app's authorizer), and the guard of the routes
that take no body (guard.py).

`create_app` keeps the backend, the authorizer, the metrics and the page's sessions on
`app.state`; the dependencies read them from there, so a route module holds no app of its own and
serves whichever app includes its router.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from kuberl_api.backend import Action, Authorizer, Backend, Verb
from kuberl_api.guard import no_body
from kuberl_api.metrics import ApiMetrics
from kuberl_api.page import session_token

bearer = HTTPBearer(auto_error=False, description="A bearer token, as configured for the server.")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
NoBody = [Depends(no_body)]


@dataclass(frozen=True)
class Caller:
    """Whoever sent the request: their token (None without one) and who decides what it may do."""

    token: str | None
    authorizer: Authorizer

    async def authorize(
        self,
        verb: Verb,
        namespace: str | None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> None:
        """Raises ApiError 401 or 403 unless the token may do `verb` on rljobs (on their
        `subresource`, when given) in `namespace` (None: at the cluster scope, which RBAC grants
        only through a ClusterRoleBinding)."""
        await self.authorizer.authorize(self.token, Action(verb, namespace, name, subresource))


def get_backend(request: Request) -> Backend:
    return request.app.state.backend


def get_metrics(request: Request) -> ApiMetrics:
    return request.app.state.metrics


def bearer_caller(request: Request, credentials: Credentials) -> Caller:
    token = credentials.credentials if credentials else None
    return Caller(token, request.app.state.authorizer)


def page_caller(request: Request, credentials: Credentials) -> Caller:
    """The bearer token, else the token of the status page's session (page.py says which routes
    accept its cookie)."""
    token = credentials.credentials if credentials else session_token(request)
    return Caller(token, request.app.state.authorizer)


BackendDep = Annotated[Backend, Depends(get_backend)]
MetricsDep = Annotated[ApiMetrics, Depends(get_metrics)]
CurrentCaller = Annotated[Caller, Depends(bearer_caller)]
PageCaller = Annotated[Caller, Depends(page_caller)]
