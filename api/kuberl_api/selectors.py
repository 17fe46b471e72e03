"""Kubernetes list semantics as pure functions: label selectors, `continue` tokens, and a list
served in chunks of `limit` items.

The local backend filters and chunks with these; the kubernetes backend passes the same query
strings to the Kubernetes API and re-applies the selector to what comes back (harmless where the
server already filtered), so both backends read a selector the same way.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from kuberl_api.backend import ApiError, JobChunk, bad_request

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[A-Za-z0-9._-]*"
_SET = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQUALITY = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*$")
_EXISTS = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


class Requirement(NamedTuple):
    """One term of a selector: `key op values` with op in, notin, exists or !exists."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "exists":
            return self.key in labels
        if self.operator == "!exists":
            return self.key not in labels
        if self.operator == "in":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values  # notin: also true when the key is absent


def parse_label_selector(selector: str | None) -> list[Requirement]:
    """The requirements of a selector such as `team=rl,tier in (a,b),!canary`; [] matches all.
    A malformed term is a 400 naming it."""
    if not selector or not selector.strip():
        return []
    return [_requirement(term) for term in _terms(selector)]


def matches(requirements: list[Requirement], labels: Mapping[str, str]) -> bool:
    return all(requirement.matches(labels) for requirement in requirements)


def _terms(selector: str) -> list[str]:
    """Splits on commas outside parentheses (`a in (x,y),b` is two terms)."""
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    return [*terms, current]


def _requirement(term: str) -> Requirement:
    if match := _SET.match(term):
        values = frozenset(v.strip() for v in match.group(3).split(",") if v.strip())
        if not values or not all(re.fullmatch(_VALUE, value) for value in values):
            raise _bad_term(term)
        return Requirement(match.group(1), match.group(2), values)
    if match := _EQUALITY.match(term):
        operator = "notin" if match.group(2) == "!=" else "in"
        return Requirement(match.group(1), operator, frozenset([match.group(3)]))
    if match := _EXISTS.match(term):
        return Requirement(match.group(2), "!exists" if match.group(1) else "exists")
    raise _bad_term(term)


def _bad_term(term: str) -> ApiError:
    return bad_request(
        "labelSelector",
        f"cannot parse {term.strip()!r}: write key=value, key!=value, key in (a,b), "
        "key notin (a,b), key or !key, separated by commas",
    )


# --- continue tokens and chunks -------------------------------------------------------------------


def encode_continue(last_name: str, last_namespace: str | None = None) -> str:
    """An opaque token for the chunk after the job called `last_name` (lists are ordered by
    name, so it stays valid while jobs come and go); a list of every namespace, ordered by
    namespace and name, gives `last_namespace` too."""
    after: dict[str, str] = {"after": last_name}
    if last_namespace is not None:
        after["namespace"] = last_namespace
    return base64.urlsafe_b64encode(json.dumps(after).encode()).decode()


def decode_continue(token: str | None) -> str | None:
    """The name a namespace's `continue` token resumes after; None without a token; 400 if it
    is not one of ours (a token of the list of every namespace included)."""
    if not token:
        return None
    payload = _continue_payload(token)
    if "namespace" in payload:
        raise _not_a_token()
    return payload["after"]


def decode_cluster_continue(token: str | None) -> tuple[str, str] | None:
    """The (namespace, name) a `continue` token of the list of every namespace resumes after;
    None without a token; 400 if it is not one of those."""
    if not token:
        return None
    payload = _continue_payload(token)
    if not isinstance(payload.get("namespace"), str):
        raise _not_a_token()
    return payload["namespace"], payload["after"]


def _continue_payload(token: str) -> dict[str, str]:
    try:
        payload = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError, TypeError):
        payload = None
    if not isinstance(payload, dict) or not isinstance(payload.get("after"), str):
        raise _not_a_token()
    return payload


def _not_a_token() -> ApiError:
    return bad_request("continue", "not a token from a previous list: start the list again")


def chunk(
    documents: Iterator[dict[str, Any]], limit: int | None, every_namespace: bool = False
) -> JobChunk:
    """The first `limit` documents (all without a limit), with a token for the rest (one that
    names the last job's namespace too in a list of `every_namespace`)."""
    items: list[dict[str, Any]] = []
    for document in documents:
        if limit and len(items) == limit:
            last = items[-1]["metadata"]
            return JobChunk(
                items, encode_continue(last["name"], last["namespace"] if every_namespace else None)
            )
        items.append(document)
    return JobChunk(items)
