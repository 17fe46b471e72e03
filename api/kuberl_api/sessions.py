"""The status page's sessions: a token given to the page's login form stays on the server, and the
browser's cookie holds only a random id for it.

A cookie holding the token itself would hand the token to whatever reads the browser's cookies (a
profile on disk, a proxy that logs headers) for as long as the token lives; an id is worth
nothing once its session ends: at logout (the page's forget form), SESSION_LIFETIME_SECONDS after
login, or when the server restarts. Every request with the id is still authorized with the token,
so a revoked token is refused at once.

Sessions live in this process's memory, at most MAX_SESSIONS of them (each holds a token of at
most the login form's 16 KiB: a bound on memory too). Only a token the server accepts opens one;
when they are all taken the oldest is dropped (its browser asks for the token again), so a flood
of logins costs memory only up to the bound. Ids are looked up by their SHA-256 digest, as tokens
are (auth.py), so the time a lookup takes says nothing about a valid id.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

SESSION_COOKIE = "kuberl_session"
"""The cookie holding the page's session id."""
SESSION_LIFETIME_SECONDS = 12 * 3600
"""A working day: a login lasts at most this long, however active."""
MAX_SESSIONS = 2048
"""Sessions kept at once (per API process)."""


class _Session(NamedTuple):
    token: str
    expires: float


class PageSessions:
    """Session ids and the tokens they stand for, each until its expiry (by `clock`, in
    seconds); at most `limit`, the oldest dropped first."""

    def __init__(
        self,
        lifetime_seconds: float = SESSION_LIFETIME_SECONDS,
        limit: int = MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lifetime_seconds, self.limit, self.clock = lifetime_seconds, limit, clock
        # By digest of the id, oldest first: with one lifetime for all, also first to expire.
        self._sessions: OrderedDict[bytes, _Session] = OrderedDict()

    def open(self, token: str) -> str:
        """A new session for `token` (one the authorizer accepted); its id, for the cookie."""
        self._drop_expired()
        while len(self._sessions) >= self.limit:
            self._sessions.popitem(last=False)
        session_id = secrets.token_urlsafe(32)
        self._sessions[_digest(session_id)] = _Session(token, self.clock() + self.lifetime_seconds)
        return session_id

    def token(self, session_id: str | None) -> str | None:
        """The token of a live session, else None (no id, an unknown one, or an ended one)."""
        if not session_id:
            return None
        key = _digest(session_id)
        session = self._sessions.get(key)
        if session is None:
            return None
        if session.expires <= self.clock():
            del self._sessions[key]
            return None
        return session.token

    def close(self, session_id: str | None) -> None:
        """Ends the session (logout); an unknown id is fine."""
        if session_id:
            self._sessions.pop(_digest(session_id), None)

    def __len__(self) -> int:
        return len(self._sessions)

    def _drop_expired(self) -> None:
        now = self.clock()
        while self._sessions and next(iter(self._sessions.values())).expires <= now:
            self._sessions.popitem(last=False)


def _digest(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode()).digest()
