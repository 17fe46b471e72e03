"""What the worker pool reports (worker_pool.py): a call completed, a worker joined, a worker was
lost with its calls."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Completed:
    """A call's result arrived from worker `worker`; `tag` is what the caller attached, `ref`
    the call's object ref (its result, still in the object store, passes on without a copy). It
    unpacks as (worker, result), as the task pool's results did before they had tags."""

    worker: int
    result: Any
    tag: Any = None
    ref: Any = None

    def __iter__(self) -> Iterator[Any]:
        return iter((self.worker, self.result))


@dataclass(frozen=True)
class Joined:
    """Worker `worker` (started first, or a replacement) takes calls from now on."""

    worker: int


@dataclass(frozen=True)
class Lost:
    """Worker `worker` died or its node went; `calls` are the tags of its calls dropped."""

    worker: int
    calls: tuple[Any, ...] = ()


Event = Completed | Joined | Lost
