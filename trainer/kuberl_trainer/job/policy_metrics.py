"""Each policy's part of a progress row in a multi-agent job of several policies (progress_row's
POLICIES): its agents' recent returns and its own learner statistics."""

from __future__ import annotations

import math
from collections import defaultdict, deque
from typing import Any

from kuberl_contract.progress_row import EPISODE_RETURN_MEAN, POLICIES, POLICY_LABEL
from kuberl_trainer.policies.multi_agent import SEPARATOR


class PolicyMetrics:
    def __init__(self, window: int):
        self.recent: defaultdict[str, deque[float]] = defaultdict(lambda: deque(maxlen=window))

    def take(self, policy_returns: dict | None, learner_stats: dict[str, float]) -> dict[str, Any]:
        """The row's POLICIES entry (nothing for a job of one policy), from an optimizer step's
        returns of each policy's agents and its learner statistics, out of which the
        `statistic/policy` ones are taken."""
        for name, returns in (policy_returns or {}).items():
            self.recent[name].extend(returns.tolist())
        own: defaultdict[str, dict[str, float]] = defaultdict(dict)
        for key in [key for key in learner_stats if SEPARATOR in key]:
            statistic, _, name = key.partition(SEPARATOR)
            own[name][statistic] = learner_stats.pop(key)
        names = sorted(self.recent.keys() | own.keys())
        if not names:
            return {}
        return {
            POLICIES: [
                {
                    POLICY_LABEL: name,
                    EPISODE_RETURN_MEAN: _mean(self.recent[name]),
                    **own.get(name, {}),
                }
                for name in names
            ]
        }


def _mean(values: deque[float]) -> float:
    return sum(values) / len(values) if values else math.nan
