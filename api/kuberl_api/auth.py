"""Who may call the API when no Kubernetes decides: a fixed set of bearer tokens, or nobody checks.

The local backend has no RBAC: a valid token may do everything, in every namespace and across them
(GET /v1/jobs), so a caller gets 401 or nothing.
Tokens are kept only as SHA-256 digests and looked up by digest, which takes the same time whichever
token is presented (no prefix of a secret leaks through timing).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from kuberl_api.backend import Action, ApiError, Identity

TOKEN_ENV = "KUBERL_API_TOKEN"
TOKEN_HOLDER = Identity()
"""Whoever holds a valid token (or anyone, without tokens): nobody has a name here."""


def unauthorized(message: str) -> ApiError:
    return ApiError(401, "Unauthorized", message)


class StaticTokens:
    """Accepts exactly the configured tokens."""

    def __init__(self, tokens: set[str]) -> None:
        if not tokens:
            raise ValueError("StaticTokens needs at least one token")
        self._digests = frozenset(_digest(token) for token in tokens)

    async def authenticate(self, token: str | None) -> Identity:
        if not token:
            raise unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
        if _digest(token) not in self._digests:
            raise unauthorized("invalid bearer token")
        return TOKEN_HOLDER

    async def check(self, identity: Identity, action: Action) -> None:
        return None  # a valid token may do everything

    async def authorize(self, token: str | None, action: Action) -> None:
        await self.authenticate(token)


class NoAuth:
    """Lets every request through (only ever served on a loopback address)."""

    async def authenticate(self, token: str | None) -> Identity:
        return TOKEN_HOLDER

    async def check(self, identity: Identity, action: Action) -> None:
        return None

    async def authorize(self, token: str | None, action: Action) -> None:
        return None


def load_tokens(token_file: Path | None, environ: dict[str, str] | None = None) -> set[str]:
    """Tokens from `token_file` (one per line; blank lines and # comments skipped) and the
    KUBERL_API_TOKEN environment variable. A missing or unreadable file is an error, not an open
    door."""
    environ = os.environ if environ is None else environ
    tokens = set()
    if token_file is not None:
        text = token_file.read_text(encoding="utf-8")
        lines = (line.strip() for line in text.splitlines())
        tokens |= {line for line in lines if line and not line.startswith("#")}
        if not tokens:
            raise ValueError(f"{token_file}: no tokens in the file (one per line)")
    if environ.get(TOKEN_ENV, "").strip():
        tokens.add(environ[TOKEN_ENV].strip())
    return tokens


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()
