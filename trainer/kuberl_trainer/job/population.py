"""Population-based training: a population of whole trainers, nested with the same primitives.

Each trial is a `Trainer` (trainer.py) in a Ray actor of its own, with its own rollout workers.
`Population` has the Trainer's interface, so the Driver runs a population exactly as it runs one
trainer: a `step()` is a round, in which every trial trains until it has sampled
perturbation_interval env steps more; then the bottom quantile exploits the top one (takes the
weights and hyperparameters of a better trial) and explores (changes those hyperparameters as
their mutations say). Its state is every trial's state plus the population's own, so a
checkpoint and a resume restore the whole population.

`exploit_pairs` and `explore` are the rules, pure functions of a random generator (pbt_rules.py).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from kuberl_contract.config import LearnerDevice, PBTConfig, RolloutConfig, with_hyperparameters
from kuberl_contract.hyperparameters import PBTHyperparameters
from kuberl_contract.progress_row import (
    BEST_TRIAL,
    EPISODE_LEN_MEAN,
    EPISODE_RETURN_MEAN,
    EPISODES_THIS_ITER,
    EPISODES_TOTAL,
    EVALUATION_CONFIRMED,
    EVALUATION_RETURN_MEAN,
    EXPLOITS,
    ITERATION,
    SAMPLES_PER_S,
    STRAGGLERS_DROPPED,
    TIME_THIS_ITER_S,
    TIME_TOTAL_S,
    TIMESTEPS_THIS_ITER,
    TIMESTEPS_TOTAL,
    TIMESTEPS_TRAINED_THIS_ITER,
    TRIALS,
    WORKER_DOWNTIME_S,
    WORKER_RESTARTS,
    WORKERS_READY,
)
from kuberl_trainer.job.pbt_rules import best_of, exploit_pairs, explore, score
from kuberl_trainer.job.trainer import Trainer
from kuberl_trainer.rollouts.interrupt import WAIT_SLICE_S, IterationAbandoned, StopRequest

# A trial's counts per iteration, added up over the round's iterations of every trial.
_PER_ITERATION = (TIMESTEPS_THIS_ITER, TIMESTEPS_TRAINED_THIS_ITER, EPISODES_THIS_ITER)
# A trial's run totals and levels, added up over the trials' newest rows.
_PER_TRIAL = (WORKER_RESTARTS, STRAGGLERS_DROPPED, WORKER_DOWNTIME_S, WORKERS_READY)


class Trial:
    """One trial: a Trainer in its own Ray actor (`ray.remote(Trial)`), stepped by the
    population one iteration per call, so a stop request is seen between iterations."""

    def __init__(self, config, rollout: RolloutConfig, seed: int, resumed_iteration: int):
        self.rollout, self.seed = rollout, seed
        self.trainer = self._build(config, resumed_iteration)

    def _build(self, config, resumed_iteration: int) -> Trainer:
        trainer = Trainer(config, self.rollout, self.seed)
        trainer.seed_everything()
        trainer.build(resumed_iteration)
        return trainer

    def step(self) -> dict[str, Any]:
        """One iteration; its progress row, with the workers restarted meanwhile."""
        row, _, restarts = self.trainer.step()
        return row | {"restarts": restarts}

    def state(self) -> dict[str, Any]:
        return self.trainer.state()

    def env_spaces(self) -> tuple[Any, Any]:
        return self.trainer.env_spaces

    def policy_state(self) -> dict[str, Any]:
        return self.trainer.policy_state()

    def donation(self) -> dict[str, Any]:
        """What a trial that exploits this one takes: the policy (weights, the learner's optimizer
        moments), the normalization statistics its weights learned with (where normalization is
        on) and the recent episodes it is ranked by."""
        state = self.trainer.state()
        driver = state["driver"]
        return {
            "policy": state["policy"],
            **{key: state[key] for key in ("normalization",) if key in state},
            "recent_returns": driver["recent_returns"],
            "recent_lengths": driver["recent_lengths"],
        }

    def restart(self, config, state: dict[str, Any] | None, donation: dict | None = None) -> None:
        """Go on with `config`, from `state` (a checkpoint's; None: this trial's own), with a
        donor's policy and recent episodes in place of its own when `donation` is given. Its
        counters, optimizer state (a replay buffer) and random generators stay its own. The new
        rollout workers get seeds of their own, as in a resumed run."""
        state = state or self.trainer.state()
        if donation is not None:
            driver = state["driver"] | {
                "recent_returns": donation["recent_returns"],
                "recent_lengths": donation["recent_lengths"],
            }
            taken = {key: donation[key] for key in ("policy", "normalization") if key in donation}
            state = state | taken | {"driver": driver}
        self.trainer.stop()
        self.trainer = self._build(config, resumed_iteration=max(1, state["driver"]["iteration"]))
        self.trainer.load_state(state)


class Population:
    """The Trainer interface (see trainer.py) over a population of trials."""

    def __init__(
        self,
        config: PBTConfig,
        rollout: RolloutConfig,
        seed: int,
        learner_gpus: int = 0,
        stop_request: StopRequest | None = None,
        learner_device: LearnerDevice = "auto",
    ):
        self.config = config
        self.hp: PBTHyperparameters = config.hyperparameters
        self.rollout = rollout
        self.seed = seed
        self.stop_request = stop_request or StopRequest()
        self.rng = np.random.default_rng(seed)
        self.iteration = 0  # rounds completed
        self.time_total_s = 0.0
        self.episodes_total = 0
        self.exploits_total = 0
        count = self.hp.population
        # Each trial's hyperparameters that differ from the inner spec's.
        self.overrides: list[dict[str, Any]] = [
            dict(self.hp.trials[i]) if i < len(self.hp.trials) else {} for i in range(count)
        ]
        self.rows: list[dict[str, Any]] = [{} for _ in range(count)]  # each trial's newest
        self.trials: list = []
        self._env_spaces: tuple[Any, Any] | None = None

    needs_ray = True

    @property
    def env_spaces(self) -> tuple[Any, Any]:
        """The spaces of the trials' envs, every trial's alike: what checkpoints record, so that
        the best trial's policy is used without an env (see trained/inference.py)."""
        import ray

        if self._env_spaces is None:
            self._env_spaces = ray.get(self.trials[0].env_spaces.remote())
        return self._env_spaces

    # -- building and ending ----------------------------------------------------------------

    def seed_everything(self) -> None:
        """Each trial seeds its own process; the population draws from its own generator."""

    def build(self, resumed_iteration: int = 0) -> None:
        import ray

        actor = ray.remote(num_cpus=self.hp.cpus_per_trial)(Trial)
        self.trials = [
            actor.remote(self.trial_config(i), self.rollout, self.trial_seed(i), resumed_iteration)
            for i in range(self.hp.population)
        ]

    def stop(self) -> None:
        """End the trials. A trial's rollout workers are actors it owns, which Ray ends with it;
        a trial that failed to start is ended alike, leaving the failure to the caller."""
        import ray

        for trial in self.trials:
            ray.kill(trial)

    def trial_config(self, index: int):
        return with_hyperparameters(self.config.trainer, self.overrides[index])

    def trial_seed(self, index: int) -> int:
        return int(np.random.SeedSequence([self.seed, index]).generate_state(1)[0] % 2**31)

    # -- rounds -------------------------------------------------------------------------------

    @property
    def timesteps(self) -> int:
        return sum(row.get(TIMESTEPS_TOTAL, 0) for row in self.rows)

    def step(self) -> tuple[dict[str, Any], dict[str, float], int]:
        """One round: every trial trains until it has sampled the round's env steps, then the
        population exploits and explores. Returns the population's progress row, no timers, and
        the rollout workers restarted meanwhile. Raises IterationAbandoned, once the trials'
        iterations in flight have ended, when a stop was requested."""
        import ray

        start = time.perf_counter()
        target = (self.iteration + 1) * self.hp.perturbation_interval
        totals = dict.fromkeys((*_PER_ITERATION, "restarts"), 0)
        pending = {}
        for index, trial in enumerate(self.trials):
            if self.rows[index].get(TIMESTEPS_TOTAL, 0) < target:
                pending[trial.step.remote()] = index
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_SLICE_S)
            for ref in ready:
                index = pending.pop(ref)
                row = self.rows[index] = ray.get(ref)
                for key in totals:
                    totals[key] += row.get(key, 0)
                if row[TIMESTEPS_TOTAL] < target and not self.stop_request.requested:
                    pending[self.trials[index].step.remote()] = index
            if self.stop_request.requested and not pending:
                raise IterationAbandoned
        self.iteration += 1
        exploits = self._exploit_and_explore()
        elapsed = time.perf_counter() - start
        self.time_total_s += elapsed
        self.episodes_total += totals[EPISODES_THIS_ITER]
        best = self.best_trial()
        row = {
            **self.totals(),
            **{key: totals[key] for key in _PER_ITERATION},
            **{key: sum(newest.get(key, 0) for newest in self.rows) for key in _PER_TRIAL},
            EPISODES_TOTAL: self.episodes_total,
            EPISODE_LEN_MEAN: self.rows[best].get(EPISODE_LEN_MEAN, math.nan),
            SAMPLES_PER_S: totals[TIMESTEPS_THIS_ITER] / elapsed,
            TIME_THIS_ITER_S: elapsed,
            BEST_TRIAL: best,
            TRIALS: [self._trial_summary(index) for index in range(len(self.trials))],
            EXPLOITS: exploits,
        }
        return row, {}, totals["restarts"]

    def best_trial(self) -> int:
        return best_of(self.rows)

    def totals(self) -> dict[str, Any]:
        best = self.rows[self.best_trial()] if self.trials else {}
        evaluations = [
            r[EVALUATION_RETURN_MEAN]
            for r in self.rows
            if r.get(EVALUATION_RETURN_MEAN) is not None
            and r.get(EVALUATION_CONFIRMED) is not False  # held on confirmation, or none played
        ]
        return {
            ITERATION: self.iteration,
            TIMESTEPS_TOTAL: self.timesteps,
            EPISODE_RETURN_MEAN: best.get(EPISODE_RETURN_MEAN, math.nan),
            EVALUATION_RETURN_MEAN: max(evaluations, default=None),
            TIME_TOTAL_S: self.time_total_s,
        }

    def _trial_summary(self, index: int) -> dict[str, Any]:
        row = self.rows[index]
        return {
            "trial": index,
            ITERATION: row.get(ITERATION, 0),
            TIMESTEPS_TOTAL: row.get(TIMESTEPS_TOTAL, 0),
            EPISODE_RETURN_MEAN: row.get(EPISODE_RETURN_MEAN, math.nan),
            "hyperparameters": self.overrides[index],
        }

    def _exploit_and_explore(self) -> list[dict[str, Any]]:
        """Every trial of the bottom quantile takes a better trial's weights and hyperparameters,
        then explores; returns what changed, for the progress row."""
        import ray

        scores = [score(row) for row in self.rows]
        pairs = exploit_pairs(scores, self.hp.quantile_fraction, self.rng)
        donations = {donor: self.trials[donor].donation.remote() for _, donor in pairs}
        changes, restarts = [], []
        for loser, donor in pairs:
            donor_config = self.trial_config(donor)
            current = {
                name: getattr(donor_config.hyperparameters, name) for name in self.hp.mutations
            }
            explored = explore(
                current,
                self.hp.mutations,
                self.hp.perturbation_factors,
                self.hp.resample_probability,
                self.rng,
            )
            self.overrides[loser] = self.overrides[donor] | explored
            config = self.trial_config(loser)
            restarts.append(self.trials[loser].restart.remote(config, None, donations[donor]))
            self.rows[loser] = self.rows[loser] | {
                EPISODE_RETURN_MEAN: self.rows[donor][EPISODE_RETURN_MEAN]
            }
            changes.append(
                {"trial": loser, "from": donor, "hyperparameters": self.overrides[loser]}
            )
        ray.get(restarts)
        self.exploits_total += len(changes)
        return changes

    # -- state --------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Every trial's state and the population's own: its round, each trial's hyperparameters
        and newest row, and its random generator."""
        import ray

        return {
            "population": {
                "iteration": self.iteration,
                "time_total_s": self.time_total_s,
                "episodes_total": self.episodes_total,
                "exploits_total": self.exploits_total,
                "overrides": self.overrides,
                "rows": self.rows,
                "rng": self.rng.bit_generator.state,
            },
            "trials": ray.get([trial.state.remote() for trial in self.trials]),
        }

    def policy_state(self) -> dict[str, Any]:
        """What acting with the best trial's policy needs, as a checkpoint's state holds it (see
        trained/inference.py's policy_in): the trials' ranks and hyperparameters, and the best
        trial's policy state in its place among the trials."""
        import ray

        best = self.best_trial()
        trials: list[dict[str, Any]] = [{} for _ in self.trials]
        trials[best] = ray.get(self.trials[best].policy_state.remote())
        return {"population": {"rows": self.rows, "overrides": self.overrides}, "trials": trials}

    def load_state(self, state: dict[str, Any]) -> None:
        import ray

        own = state["population"]  # of as many trials (the checkpoint's identity says so)
        self.iteration = own["iteration"]
        self.time_total_s = own["time_total_s"]
        self.episodes_total = own["episodes_total"]
        self.exploits_total = own["exploits_total"]
        self.overrides = own["overrides"]
        self.rows = own["rows"]
        self.rng.bit_generator.state = own["rng"]
        ray.get(
            [
                trial.restart.remote(self.trial_config(index), trial_state)
                for index, (trial, trial_state) in enumerate(
                    zip(self.trials, state["trials"], strict=True)
                )
            ]
        )
