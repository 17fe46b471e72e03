"""Hyperparameter names users bring from Stable-Baselines3 and RLlib, and where kuberl keeps what
each one sets, algorithm by algorithm.

kuberl accepts none of them as an alias: the same name means different things in the two
libraries (`train_batch_size` is PPO's whole batch in RLlib and DQN's minibatch) and sometimes
counts in other units than kuberl's field (RLlib's `target_network_update_freq` counts env steps,
kuberl's `target_update_interval` gradient steps). An unknown field that is one of these names is
refused with a pointer instead: kuberl's field, its meaning, and how to convert where the units
differ (`known_name_hint`). `kuberl explain` lists them beside the fields they map to
(`names_mapped_to`).

Pointers name a hyperparameter (`rollout_length`), a field of the trainer relative to it
(`{trainer}.seed`, filled in with the trainer's path), or a path elsewhere in the spec
(`spec.rolloutWorkers.replicas`). Algorithm names are strings here, as in the table of
algorithms; a test holds the two equal, and every hyperparameter named to exist.
"""

from __future__ import annotations

from dataclasses import dataclass

SB3 = "Stable-Baselines3"
RLLIB = "RLlib"
BOTH = "Stable-Baselines3 and RLlib"
RL_ZOO = "RL Baselines3 Zoo"
RAY_TUNE = "Ray Tune"

PBT = "PBT"
"""Population-based training: its hyperparameters are the population's, its trials' are the
inner trainer's (`spec.trainer.trainer.hyperparameters`)."""

# The algorithms of the table, grouped by what they have in common.
PG = ("PG",)
ACTOR_CRITIC = ("A2C", "A3C")
PPO = ("PPO",)
VTRACE = ("IMPALA", "APPO")
ON_POLICY = (*PG, *ACTOR_CRITIC, *PPO, *VTRACE)
Q_LEARNING = ("DQN", "APEX")
SAC = ("SAC",)
REPLAY = (*Q_LEARNING, *SAC)
ES = ("ES",)
SAMPLING = (*ON_POLICY, *REPLAY)
WHOLE_BATCH = ("PG", "A2C", "PPO")
"""Learn on each iteration's whole batch, from every worker at once."""
CLIPPED = ("PPO", "APPO")
"""Clip a surrogate objective, over several epochs."""
NO_TARGET_NETWORK = (*PG, *ACTOR_CRITIC, *PPO, "IMPALA", *ES)
ALGORITHM_NAMES = (*SAMPLING, *ES)
"""Every algorithm of the table (ALGORITHMS), PBT aside."""

TRAINER = "{trainer}"
"""Stands for the trainer's path (spec.trainer, or a population's spec.trainer.trainer)."""

ITERATION_BATCH = "rollout_length x envsPerWorker x max(1, replicas) env steps"


@dataclass(frozen=True)
class Pointer:
    """Where kuberl keeps what a known name sets, for one algorithm."""

    field: str | None
    """A hyperparameter of the algorithm, `{trainer}.<path>` or `spec.<path>`; None where kuberl
    has no equivalent."""

    note: str
    """What kuberl's field means and how to convert a value; without a field, why there is
    none and what comes closest."""

    @property
    def hyperparameter(self) -> str | None:
        """The hyperparameter pointed at, None for a field elsewhere in the spec (or none)."""
        if self.field is None or "." in self.field:
            return None
        return self.field


@dataclass(frozen=True)
class KnownName:
    """A hyperparameter name of another library, and what it becomes in each algorithm."""

    name: str
    """As the other library spells it."""

    library: str
    """Whose name it is (SB3, RLLIB, ...)."""

    pointers: dict[str, Pointer]
    """By algorithm name: every algorithm of the table, and PBT where it has one."""


def _pointers(*groups: tuple[tuple[str, ...], Pointer]) -> dict[str, Pointer]:
    """One pointer per algorithm from (algorithms, pointer) pairs; a later pair overrides."""
    return {name: pointer for algorithms, pointer in groups for name in algorithms}


def _all_but(*names: str) -> tuple[str, ...]:
    """Every algorithm of the table but these."""
    return tuple(name for name in ALGORITHM_NAMES if name not in names)


def _same(field: str | None, note: str) -> dict[str, Pointer]:
    """The same pointer for every algorithm."""
    return _pointers((ALGORITHM_NAMES, Pointer(field, note)))


_NO_LOSS = "ES takes no gradient of a loss: it ranks the returns of perturbed parameters"
_WHOLE_EPISODES = "ES scores whole episodes; an update covers episodes_per_batch of them"
_NO_REPLAY = "it learns on fresh samples, with no replay buffer"
_NO_TARGET = "it has no target network"

_ROLLOUT_LENGTH = Pointer(
    "rollout_length",
    f"env steps taken by every env of a rollout worker per sample call; an iteration samples "
    f"{ITERATION_BATCH}",
)
_BATCH_FROM_ROLLOUTS = Pointer(
    "rollout_length",
    "rollout_length = the batch size / envsPerWorker / max(1, replicas), as each iteration "
    f"learns on {ITERATION_BATCH}",
)
_A3C_BATCH = Pointer(
    "rollout_length",
    "each gradient is one worker's rollout_length x envsPerWorker env steps: set rollout_length "
    "to the batch size / envsPerWorker",
)
_PPO_MINIBATCH = Pointer("minibatch_size", "samples per SGD minibatch")
_VTRACE_MINIBATCH = Pointer(
    "minibatch_size", "samples per SGD step; null lets the batch's policy lag decide"
)
_REPLAY_MINIBATCH = Pointer("batch_size", "transitions replayed per gradient step")
_ONE_STEP = Pointer(None, "it takes one gradient step on each whole batch")
_NO_EPOCHS_IMPALA = Pointer(
    None,
    "it passes once over each learner batch, in minibatch_size minibatches; APPO takes "
    "num_epochs passes",
)
_DQN_STEPS = Pointer(None, "gradient_steps sets its gradient steps per iteration")
_SAC_STEPS = Pointer(None, "gradient_steps_per_env_step sets its gradient steps")
_EPOCHS = Pointer("num_epochs", "passes of SGD over each batch")
_VALUE_WEIGHT = Pointer("vf_coeff", "weight of the value-function loss")
_NO_VALUE = (
    (PG, Pointer(None, "PG learns no value function; normalize_returns is its baseline")),
    (Q_LEARNING, Pointer(None, "its loss is the TD error of its Q-values alone")),
    (SAC, Pointer(None, "its critics have a loss and an Adam step of their own, unweighted")),
    (ES, Pointer(None, _NO_LOSS)),
)
_GAE = Pointer("gae_lambda", "GAE lambda")
_NO_GAE = (
    (PG, Pointer(None, "PG learns on discounted returns-to-go, without GAE")),
    (VTRACE, Pointer(None, "V-trace computes its targets, with no lambda")),
    (REPLAY, Pointer(None, "it bootstraps after n_step rewards, without GAE")),
    (ES, Pointer(None, _NO_LOSS)),
)
_CLIP = Pointer("clip_range", "clip parameter of the surrogate objective")
_NO_CLIP = Pointer(None, "only PPO and APPO clip a surrogate objective")
_ENTROPY = Pointer("entropy_coeff", "weight of the entropy bonus in the loss")
_NO_ENTROPY_Q = Pointer(
    None,
    "Q-learning has no entropy bonus; it explores epsilon-greedily (epsilon_initial, "
    "epsilon_final, epsilon_timesteps)",
)
_NO_ENTROPY_APEX = Pointer(
    None,
    "Q-learning has no entropy bonus; Ape-X workers explore at fixed epsilons (worker_epsilon, "
    "worker_epsilon_alpha)",
)
_NO_REPLAY_BUFFER = ((ON_POLICY, Pointer(None, _NO_REPLAY)), (ES, Pointer(None, _NO_REPLAY)))
_STOCHASTIC = Pointer(None, "it explores by sampling its stochastic policy")
_NO_EPSILON = (
    (ON_POLICY, _STOCHASTIC),
    (SAC, _STOCHASTIC),
    (("APEX",), Pointer(None, "Ape-X workers explore at fixed epsilons: worker_epsilon")),
    (ES, Pointer(None, "ES explores by perturbing its parameters (noise_stdev)")),
)
_NETWORK = Pointer(
    "hidden_sizes",
    "widths of the hidden layers of every network, one list for all of them: separate lists "
    f"for the policy and the value function have no equivalent; the CNN for images is "
    f"{TRAINER}.model",
)
_ACTIVATION = Pointer("activation", "nonlinearity between hidden layers: tanh or relu")
_MODEL = Pointer(
    f"{TRAINER}.model",
    "the encoder of observations: encoder, convFilters, features, vfShareLayers; the MLP's "
    "layers are the hyperparameters hidden_sizes and activation",
)
_SHARED_TRUNK = Pointer(
    f"{TRAINER}.model.vfShareLayers",
    "whether the policy and the value function share the encoder; null shares the CNN only",
)
_ENVS = Pointer(
    "spec.rolloutWorkers.envsPerWorker", "envs each rollout worker, or the driver, steps together"
)
_WORKERS = Pointer(
    "spec.rolloutWorkers.replicas", "remote rollout workers; 0 samples in the driver"
)
_NORMALIZATION = Pointer(
    f"{TRAINER}.normalization",
    "observation normalization and reward scaling by running statistics, as VecNormalize",
)
_ES_NORMALIZATION = Pointer(
    "normalize_observations", "standardize observations by the workers' running statistics"
)

_KNOWN_NAMES = (
    # --- Sampling: how many env steps, per env, per batch ---------------------------------------
    KnownName(
        "n_steps",
        SB3,
        _pointers(
            (ON_POLICY, _ROLLOUT_LENGTH),
            (REPLAY, Pointer("n_step", "rewards summed before bootstrapping, for n-step returns")),
            (ES, Pointer(None, _WHOLE_EPISODES)),
        ),
    ),
    KnownName(
        "rollout_fragment_length",
        RLLIB,
        _pointers((SAMPLING, _ROLLOUT_LENGTH), (ES, Pointer(None, _WHOLE_EPISODES))),
    ),
    KnownName(
        "train_batch_size",
        RLLIB,
        _pointers(
            (WHOLE_BATCH, _BATCH_FROM_ROLLOUTS),
            (("A3C",), _A3C_BATCH),
            (REPLAY, _REPLAY_MINIBATCH),
            (ES, Pointer(None, _WHOLE_EPISODES)),
        ),
    ),
    KnownName(
        "train_batch_size_per_learner",
        RLLIB,
        _pointers(
            (WHOLE_BATCH, _BATCH_FROM_ROLLOUTS),
            (("A3C",), _A3C_BATCH),
            (VTRACE, Pointer("train_batch_size", "env steps per learner step")),
            (REPLAY, _REPLAY_MINIBATCH),
            (ES, Pointer(None, _WHOLE_EPISODES)),
        ),
    ),
    KnownName(
        "batch_size",
        SB3,
        _pointers(
            (("PG", "A2C"), _BATCH_FROM_ROLLOUTS),
            (("A3C",), _A3C_BATCH),
            (PPO, Pointer("minibatch_size", "samples per SGD minibatch, as SB3's PPO batch_size")),
            (VTRACE, _VTRACE_MINIBATCH),
            (ES, Pointer(None, _WHOLE_EPISODES)),
        ),
    ),
    *(
        KnownName(
            name,
            RLLIB,
            _pointers(
                (PG + ACTOR_CRITIC, _ONE_STEP),
                (PPO, _PPO_MINIBATCH),
                (VTRACE, _VTRACE_MINIBATCH),
                (REPLAY, _REPLAY_MINIBATCH),
                (ES, Pointer(None, _NO_LOSS)),
            ),
        )
        for name in ("sgd_minibatch_size", "minibatch_size")
    ),
    *(
        KnownName(
            name,
            library,
            _pointers(
                (PG + ACTOR_CRITIC, _ONE_STEP),
                (CLIPPED, _EPOCHS),
                (("IMPALA",), _NO_EPOCHS_IMPALA),
                (Q_LEARNING, _DQN_STEPS),
                (SAC, _SAC_STEPS),
                (ES, Pointer(None, _NO_LOSS)),
            ),
        )
        for name, library in (("num_sgd_iter", RLLIB), ("num_epochs", RLLIB), ("n_epochs", SB3))
    ),
    # --- Off-policy: when and how much to learn -------------------------------------------------
    KnownName(
        "train_freq",
        SB3,
        _pointers(
            (ON_POLICY, Pointer(None, "it learns on every batch of rollout_length env steps")),
            (
                ("DQN",),
                Pointer(
                    "rollout_length",
                    "env steps of every env per iteration, between two rounds of "
                    "gradient_steps gradient steps; SB3's train_freq also counts steps of each "
                    "env",
                ),
            ),
            (
                ("APEX",),
                Pointer(
                    "training_intensity",
                    "transitions replayed per transition sampled: SB3's batch_size x "
                    "gradient_steps / train_freq / n_envs",
                ),
            ),
            (
                SAC,
                Pointer(
                    "gradient_steps_per_env_step",
                    "gradient steps per env step sampled: SB3's gradient_steps / train_freq / "
                    "n_envs",
                ),
            ),
            (ES, Pointer(None, _NO_LOSS)),
        ),
    ),
    KnownName(
        "gradient_steps",
        SB3,
        _pointers(
            (PG + ACTOR_CRITIC, _ONE_STEP),
            (CLIPPED, Pointer(None, "it takes num_epochs passes of minibatches")),
            (("IMPALA",), _NO_EPOCHS_IMPALA),
            (
                SAC,
                Pointer(
                    "gradient_steps_per_env_step",
                    "gradient steps per env step sampled: SB3's gradient_steps / train_freq / "
                    "n_envs",
                ),
            ),
            (ES, Pointer(None, _NO_LOSS)),
        ),
    ),
    KnownName(
        "training_intensity",
        RLLIB,
        _pointers(
            (ON_POLICY, Pointer(None, _NO_REPLAY)),
            (
                ("DQN",),
                Pointer(
                    "gradient_steps",
                    "gradient steps per iteration: training_intensity x the iteration's env "
                    "steps / batch_size",
                ),
            ),
            (
                SAC,
                Pointer(
                    "gradient_steps_per_env_step",
                    "gradient steps per env step sampled: training_intensity / batch_size",
                ),
            ),
            (ES, Pointer(None, _NO_REPLAY)),
        ),
    ),
    *(
        KnownName(
            name,
            library,
            _pointers(
                *_NO_REPLAY_BUFFER,
                (REPLAY, Pointer("learning_starts", "env steps sampled before the first update")),
            ),
        )
        for name, library in (
            ("learning_starts", BOTH),
            ("num_steps_sampled_before_learning_starts", RLLIB),
        )
    ),
    *(
        KnownName(
            name,
            library,
            _pointers(
                *_NO_REPLAY_BUFFER,
                (
                    REPLAY,
                    Pointer(
                        "buffer_size",
                        "capacity in transitions; prioritized_replay and its alpha, beta and eps "
                        "are hyperparameters of their own",
                    ),
                ),
            ),
        )
        for name, library in (("buffer_size", BOTH), ("replay_buffer_config", RLLIB))
    ),
    # --- Target networks ------------------------------------------------------------------------
    KnownName(
        "target_update_interval",
        SB3,
        _pointers(
            (NO_TARGET_NETWORK, Pointer(None, _NO_TARGET)),
        ),
    ),
    KnownName(
        "target_network_update_freq",
        RLLIB,
        _pointers(
            (NO_TARGET_NETWORK, Pointer(None, _NO_TARGET)),
            (
                Q_LEARNING + SAC,
                Pointer(
                    "target_update_interval",
                    "counted in gradient steps, where RLlib counts env steps sampled: divide by "
                    "the env steps sampled per gradient step",
                ),
            ),
            (("APPO",), Pointer("target_update_interval", "learner steps between refreshes")),
        ),
    ),
    KnownName(
        "tau",
        BOTH,
        _pointers(
            (NO_TARGET_NETWORK, Pointer(None, _NO_TARGET)),
            (
                Q_LEARNING,
                Pointer(
                    None,
                    "it copies the online network into the target (a tau of 1) every "
                    "target_update_interval gradient steps",
                ),
            ),
            (
                ("APPO",),
                Pointer(None, "its target network is a copy, every target_update_interval steps"),
            ),
        ),
    ),
    # --- Exploration ----------------------------------------------------------------------------
    KnownName(
        "exploration_fraction",
        SB3,
        _pointers(
            *_NO_EPSILON,
            (
                ("DQN",),
                Pointer(
                    "epsilon_timesteps",
                    "env steps over which epsilon decays: exploration_fraction x "
                    f"{TRAINER}.stop.timesteps",
                ),
            ),
        ),
    ),
    KnownName(
        "exploration_initial_eps",
        SB3,
        _pointers(*_NO_EPSILON, (("DQN",), Pointer("epsilon_initial", "epsilon at the start"))),
    ),
    KnownName(
        "exploration_final_eps",
        SB3,
        _pointers(
            *_NO_EPSILON,
            (("DQN",), Pointer("epsilon_final", "epsilon after epsilon_timesteps env steps")),
        ),
    ),
    *(
        KnownName(
            name,
            RLLIB,
            _pointers(
                *_NO_EPSILON,
                (
                    ("DQN",),
                    Pointer(
                        "epsilon_initial",
                        "epsilon decays linearly from epsilon_initial to epsilon_final over "
                        "epsilon_timesteps env steps",
                    ),
                ),
            ),
        )
        for name in ("exploration_config", "epsilon")
    ),
    # --- The loss -------------------------------------------------------------------------------
    KnownName(
        "lr",
        RLLIB,
        _same("learning_rate", "Adam step size"),
    ),
    KnownName(
        "stepsize",
        RLLIB,
        _same("learning_rate", "Adam step size"),
    ),
    KnownName(
        "gamma",
        BOTH,
        _pointers((ES, Pointer(None, "ES scores undiscounted episode returns"))),
    ),
    *(
        KnownName(name, library, _pointers((ACTOR_CRITIC + PPO, _GAE), *_NO_GAE))
        for name, library in (("gae_lambda", SB3), ("lambda", RLLIB), ("lambda_", RLLIB))
    ),
    KnownName(
        "ent_coef",
        SB3,
        _pointers(
            (ON_POLICY, _ENTROPY),
            (("DQN",), _NO_ENTROPY_Q),
            (("APEX",), _NO_ENTROPY_APEX),
            (
                SAC,
                Pointer(
                    "initial_alpha",
                    "the entropy coefficient at the start, always learned as with SB3's 'auto', "
                    "towards target_entropy; a fixed coefficient has no equivalent",
                ),
            ),
            (ES, Pointer(None, _NO_LOSS)),
        ),
    ),
    *(
        KnownName(
            name, library, _pointers((ACTOR_CRITIC + PPO + VTRACE, _VALUE_WEIGHT), *_NO_VALUE)
        )
        for name, library in (("vf_coef", SB3), ("vf_loss_coeff", RLLIB))
    ),
    KnownName(
        "_lr_vf",
        RLLIB,
        _pointers(
            (ALGORITHM_NAMES, Pointer(None, "one Adam step size for all its networks")),
            (
                ACTOR_CRITIC + PPO + VTRACE,
                Pointer(
                    "vf_learning_rate_ratio",
                    "the value network's Adam step size as a multiple of learning_rate: "
                    "_lr_vf / lr",
                ),
            ),
            (ES, Pointer(None, _NO_LOSS)),
        ),
    ),
    KnownName(
        "clip_range",
        SB3,
        _pointers((_all_but(*CLIPPED), _NO_CLIP)),
    ),
    KnownName(
        "clip_param",
        RLLIB,
        _pointers((_all_but(*CLIPPED), _NO_CLIP), (CLIPPED, _CLIP)),
    ),
    KnownName(
        "clip_range_vf",
        SB3,
        _pointers(
            (ALGORITHM_NAMES, Pointer(None, "only PPO clips its value predictions")),
            (
                PPO,
                Pointer(
                    "vf_clip_range",
                    "value predictions clipped to this distance from the old ones; null disables "
                    "it",
                ),
            ),
        ),
    ),
    KnownName(
        "vf_clip_param",
        RLLIB,
        _pointers(
            (ALGORITHM_NAMES, Pointer(None, "only PPO clips its value predictions")),
            (
                PPO,
                Pointer(
                    "vf_clip_range",
                    "not the same clip: RLlib caps the squared value error at vf_clip_param, "
                    "kuberl keeps each value prediction within vf_clip_range of the old one, as "
                    "SB3's clip_range_vf; null (the default) disables it",
                ),
            ),
        ),
    ),
    *(
        KnownName(
            name,
            RLLIB,
            _pointers(
                (ALGORITHM_NAMES, Pointer(None, "it has no KL penalty")),
                (
                    CLIPPED,
                    Pointer(
                        None,
                        "there is no KL penalty, only the clipped surrogate; PPO's target_kl "
                        "stops an iteration's epochs once the approximate KL exceeds it",
                    ),
                ),
            ),
        )
        for name in ("kl_coeff", "kl_target")
    ),
    KnownName(
        "target_kl",
        SB3,
        _pointers(
            (_all_but("PPO"), Pointer(None, "only PPO stops its epochs early on the KL")),
        ),
    ),
    KnownName(
        "grad_clip",
        RLLIB,
        _pointers(
            (SAMPLING, Pointer("max_grad_norm", "bound on the global gradient norm; null: none")),
            (ES, Pointer(None, _NO_LOSS)),
        ),
    ),
    KnownName(
        "max_grad_norm",
        SB3,
        _pointers((ES, Pointer(None, _NO_LOSS))),
    ),
    KnownName(
        "normalize_advantage",
        SB3,
        _pointers(
            (
                ACTOR_CRITIC + PPO + VTRACE,
                Pointer("normalize_advantages", "standardize advantages"),
            ),
            (PG, Pointer("normalize_returns", "standardize returns: PG has no advantages")),
            (REPLAY, Pointer(None, "it learns Q-values, with no advantages")),
            (ES, Pointer(None, "ES ranks returns as centered ranks")),
        ),
    ),
    KnownName(
        "log_std_init",
        SB3,
        _pointers(
            (ALGORITHM_NAMES, Pointer(None, "only PPO sets the Gaussian's starting log std")),
            (PPO, Pointer("initial_log_std", "starting log std of the Gaussian policy")),
            (SAC, Pointer(None, "its actor's log std is an output of the network")),
        ),
    ),
    KnownName(
        "lr_schedule",
        RLLIB,
        _pointers(
            (ALGORITHM_NAMES, Pointer(None, "its step size is constant")),
            (
                PPO,
                Pointer(
                    "schedule",
                    "linear decays learning_rate and clip_range to zero at stop.timesteps; "
                    "piecewise schedules have no equivalent",
                ),
            ),
        ),
    ),
    # --- Networks: hyperparameters here, the encoder in the model section -----------------------
    KnownName("net_arch", SB3, _pointers((ALGORITHM_NAMES, _NETWORK))),
    KnownName("fcnet_hiddens", RLLIB, _pointers((ALGORITHM_NAMES, _NETWORK))),
    KnownName("activation_fn", SB3, _pointers((ALGORITHM_NAMES, _ACTIVATION))),
    KnownName("fcnet_activation", RLLIB, _pointers((ALGORITHM_NAMES, _ACTIVATION))),
    KnownName(
        "policy_kwargs",
        SB3,
        _same(
            "hidden_sizes",
            f"SB3's net_arch and activation_fn are hidden_sizes and activation here; the "
            f"features extractor is {TRAINER}.model",
        ),
    ),
    KnownName("model", RLLIB, _pointers((ALGORITHM_NAMES, _MODEL))),
    KnownName("vf_share_layers", RLLIB, _pointers((ALGORITHM_NAMES, _SHARED_TRUNK))),
    KnownName("share_features_extractor", SB3, _pointers((ALGORITHM_NAMES, _SHARED_TRUNK))),
    KnownName(
        "conv_filters",
        RLLIB,
        _same(f"{TRAINER}.model.convFilters", "the CNN's [out_channels, kernel, stride] layers"),
    ),
    # --- Not hyperparameters: other sections of the spec ----------------------------------------
    KnownName(
        "seed",
        BOTH,
        _same(f"{TRAINER}.seed", "seed of envs, networks and exploration"),
    ),
    KnownName(
        "total_timesteps",
        SB3,
        _same(f"{TRAINER}.stop.timesteps", "env steps to train for, one of the stop conditions"),
    ),
    KnownName("n_envs", RL_ZOO, _pointers((ALGORITHM_NAMES, _ENVS))),
    KnownName("num_envs_per_env_runner", RLLIB, _pointers((ALGORITHM_NAMES, _ENVS))),
    KnownName("num_envs_per_worker", RLLIB, _pointers((ALGORITHM_NAMES, _ENVS))),
    KnownName("num_env_runners", RLLIB, _pointers((ALGORITHM_NAMES, _WORKERS))),
    KnownName("num_workers", RLLIB, _pointers((ALGORITHM_NAMES, _WORKERS))),
    KnownName(
        "num_gpus",
        RLLIB,
        _same("spec.learner.gpus", "GPUs of the learner"),
    ),
    KnownName(
        "normalize",
        RL_ZOO,
        _pointers((ALGORITHM_NAMES, _NORMALIZATION), (ES, _ES_NORMALIZATION)),
    ),
    KnownName(
        "observation_filter",
        RLLIB,
        _pointers((ALGORITHM_NAMES, _NORMALIZATION), (ES, _ES_NORMALIZATION)),
    ),
    # --- Population-based training --------------------------------------------------------------
    KnownName(
        "hyperparam_mutations",
        RAY_TUNE,
        _pointers(
            (ALGORITHM_NAMES, Pointer(None, "only algorithm: PBT explores hyperparameters")),
            ((PBT,), Pointer("mutations", "the trials' hyperparameters explore changes")),
        ),
    ),
    KnownName(
        "num_samples",
        RAY_TUNE,
        _pointers(
            (ALGORITHM_NAMES, Pointer(None, "only algorithm: PBT trains a population")),
            ((PBT,), Pointer("population", "trials trained side by side")),
        ),
    ),
)

KNOWN_NAMES: dict[str, KnownName] = {known.name: known for known in _KNOWN_NAMES}
"""Every known name, by its spelling."""


def known_name_hint(
    name: str,
    algorithm: str,
    trainer_path: str = "spec.trainer",
    hyperparameters_path: str | None = None,
) -> str | None:
    """Why `name`, unknown where it was written, is refused, and what to set instead; None when
    it is no other library's name, or one that `algorithm` has a field of its own for.
    `trainer_path` is where the trainer sits (a population's trials: spec.trainer.trainer);
    `hyperparameters_path`, given where the name was not written among the hyperparameters,
    prefixes the hyperparameter pointed at."""
    known = KNOWN_NAMES.get(name)
    if known is None:
        return None
    pointer = known.pointers.get(algorithm)
    if pointer is None and algorithm == PBT:
        pointer = _same_section(known)
    if pointer is None and algorithm == PBT:
        return (
            f"unknown field; this is {known.library}'s name for a trainer's setting: PBT's "
            "hyperparameters are the population's, and the trials' own go in "
            f"{trainer_path}.trainer.hyperparameters"
        )
    if pointer is None:  # the algorithm's own field (a test holds the table so)
        return None
    if pointer.field is None:
        note = pointer.note.replace(TRAINER, trainer_path)
        return (
            f"unknown field; this is {known.library}'s name, and {algorithm} has no "
            f"equivalent: {note}"
        )
    field, note = (text.replace(TRAINER, trainer_path) for text in (pointer.field, pointer.note))
    if pointer.hyperparameter and hyperparameters_path:
        field = f"{hyperparameters_path}.{field}"
    return f"unknown field; this is {known.library}'s name: kuberl's is {field} ({note})"


def _same_section(known: KnownName) -> Pointer | None:
    """The pointer of a name that every algorithm keeps in the same section outside the
    hyperparameters (seed, envs per worker): a population has that section too."""
    pointers = {known.pointers.get(algorithm) for algorithm in ALGORITHM_NAMES}
    if len(pointers) != 1:
        return None
    (pointer,) = pointers
    if pointer is None or pointer.field is None or pointer.hyperparameter:
        return None
    return pointer


def names_mapped_to(field: str, algorithm: str) -> list[str]:
    """The known names that `algorithm`'s hyperparameter `field` stands for, other than its own
    name."""
    return [
        known.name
        for known in _KNOWN_NAMES
        if known.name != field
        and (pointer := known.pointers.get(algorithm)) is not None
        and pointer.hyperparameter == field
    ]
