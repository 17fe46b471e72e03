"""The one weights broadcaster: the learner's weights go into the object store once per version,
and every worker that needs them (one returning a batch, all of them at a synchronous step, a
worker joining the pool) gets the reference, never a copy of its own.

With observation and reward normalization on (spec.trainer.normalization, `GlobalNormalization`),
each put also puts the global statistics as they are then, and every weight call hands both to the
worker, so that it acts with the statistics its weights were learned with.

It also knows which weights version each worker holds, as far as versions were given (the
asynchronous optimizers count the learner's steps): a joining worker holds what it was sent as it
joined, a lost one nothing. Which worker is due fresh weights is the optimizers' decision
(`flow_control.weights_due`); how they travel is this module's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kuberl_trainer.envs.normalization import GlobalNormalization

if TYPE_CHECKING:
    from kuberl_trainer.policies.interface import Weights


class WeightsBroadcaster:
    def __init__(self, normalization: GlobalNormalization, initial: Callable[[], Weights]):
        """`initial()` gives the weights a worker starts with when none were put yet (the local
        worker's, as built or restored)."""
        self.normalization = normalization
        self._initial = initial
        self.ref: Any = None  # the weights put last
        self.version: int | None = None  # their version, where the putter gave one
        self.global_timesteps = 0
        self.held: dict[int, int | None] = {}  # worker index → the version it was sent last

    def put(self, weights: Weights, global_timesteps: int, version: int | None = None) -> Any:
        """Weights into the object store once, with the normalization statistics, for any number
        of `send` calls; they are also what a joining worker starts with."""
        import ray

        self.global_timesteps = global_timesteps
        self.ref = ray.put(weights)
        self.version = version
        self.normalization.put()
        return self.ref

    def send(self, handle: Any, weights_ref: Any) -> Any:
        """A worker's set_weights call (the statistics put last after the weights, when
        normalization is on); queued behind its calls in flight, so its next call uses them."""
        extra = self.normalization.with_weights()
        return handle.set_weights.remote(weights_ref, self.global_timesteps, *extra)

    def to_joining(self, index: int, handle: Any) -> tuple[Any, Any]:
        """The weights a starting worker's first call sets: the newest put (the initial weights
        put first if nothing was). Returns (the call's ref, the weights ref it carried)."""
        if self.ref is None:
            self.put(self._initial(), self.global_timesteps)
        self.held[index] = self.version
        return self.send(handle, self.ref), self.ref

    def catch_up(self, index: int, handle: Any, sent: Any) -> None:
        """A worker that has just joined gets the newest weights if they moved on while it
        started (its first call carried `sent`)."""
        if self.ref is not sent:
            self.send(handle, self.ref)
            self.held[index] = self.version

    def forget(self, index: int) -> None:
        """The worker in slot `index` was lost: it holds no weights."""
        self.held.pop(index, None)

    def is_put(self, version: int) -> bool:
        """Whether the weights put last are those of `version`."""
        return self.ref is not None and self.version == version
