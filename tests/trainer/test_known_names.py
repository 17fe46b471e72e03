"""Stable-Baselines3 and RLlib names are refused with a pointer to kuberl's field, checked over the
whole table: every name for every algorithm, through the manifest validation users meet."""

from __future__ import annotations

import inspect
import types
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin

import pytest
from pydantic import BaseModel, Field

from kuberl_contract.config import ALGORITHMS, PBT, TRAINER_CONFIGS
from kuberl_contract.hyperparameters import PBTHyperparameters
from kuberl_contract.hyperparameters.known_as import KnownAs, NoEquivalent
from kuberl_contract.hyperparameters.known_names import (
    KNOWN_NAMES,
    RAY_TUNE,
    RL_ZOO,
    RLLIB,
    SB3,
    TRAINER,
    Pointer,
    declared_pointers,
    known_name_hint,
    names_mapped_to,
)
from kuberl_operator.spec import RLJob
from kuberl_operator.validation import InvalidManifest, validate_rljob
from testkit import ROOT, edited, rljob

MINIMAL: dict[str, Any] = rljob("known-names", minimal=True)


def hyperparameter_problems(algorithm: str, **hyperparameters: Any) -> dict[str, str]:
    """Path -> message of every problem of a minimal job of `algorithm` with these
    hyperparameters."""
    document = edited(
        MINIMAL,
        **{
            "spec.trainer.algorithm": algorithm,
            "spec.trainer.hyperparameters": hyperparameters,
        },
    )
    with pytest.raises(InvalidManifest) as caught:
        validate_rljob(document)
    return {problem.path: problem.message for problem in caught.value.problems}


def fields_of(algorithm: str) -> set[str]:
    return set(ALGORITHMS[algorithm].hyperparameters.model_fields)


def foreign_pairs() -> list[tuple[str, str]]:
    """(name, algorithm) for every known name an algorithm has no field of its own called."""
    return [
        (name, algorithm)
        for name in KNOWN_NAMES
        for algorithm in ALGORITHMS
        if name not in fields_of(algorithm)
    ]


# --- The declarations beside the fields ---------------------------------------------------------


class Base(BaseModel):
    size: Annotated[int, Field(ge=1), KnownAs("the base's size", sb3="n_size", rllib="size_n")] = 1
    no_equivalent: ClassVar[tuple[NoEquivalent, ...]] = (
        NoEquivalent("the base has none", sb3="n_other"),
    )


class Derived(Base):
    size: int = 2  # declared again without names: the base's still point here
    other: Annotated[int, KnownAs("the derived one's", sb3="n_other")] = 0
    no_equivalent = (NoEquivalent("not here", rllib="size_n"),)


def test_a_class_declares_names_for_its_subclasses_and_a_subclass_overrides_them():
    assert declared_pointers(Base) == {
        "n_size": ({SB3}, Pointer("size", "the base's size")),
        "size_n": ({RLLIB}, Pointer("size", "the base's size")),
        "n_other": ({SB3}, Pointer(None, "the base has none")),
    }
    assert declared_pointers(Derived) == {
        "n_size": ({SB3}, Pointer("size", "the base's size")),
        "size_n": ({RLLIB}, Pointer(None, "not here")),
        "n_other": ({SB3}, Pointer("other", "the derived one's")),
    }


def test_a_name_declared_twice_in_one_class_is_refused():
    class Twice(BaseModel):
        first: Annotated[int, KnownAs("one", sb3="n")] = 0
        no_equivalent: ClassVar[tuple[NoEquivalent, ...]] = (NoEquivalent("none", sb3="n"),)

    with pytest.raises(ValueError, match="Twice declares n twice"):
        declared_pointers(Twice)


def test_a_name_both_libraries_use_is_both_libraries_name():
    assert KnownAs("", sb3="seed", rllib=("seed", "x")).libraries() == {
        "seed": {SB3, RLLIB},
        "x": {RLLIB},
    }
    assert KNOWN_NAMES["seed"].library == f"{SB3} and {RLLIB}"


def test_declarations_stay_out_of_the_json_schema():
    """The CRD and the REST API's schema are the models' JSON schemas."""

    class Plain(BaseModel):
        size: Annotated[int, Field(ge=1)] = 1

    class Named(BaseModel):
        size: Annotated[int, Field(ge=1), KnownAs("n", sb3="n_size")] = 1

    assert Named.model_json_schema()["properties"] == Plain.model_json_schema()["properties"]


# --- The table read from them -------------------------------------------------------------------


def test_the_table_covers_every_algorithm_of_the_table_of_algorithms_and_pbt():
    covered = {algorithm for known in KNOWN_NAMES.values() for algorithm in known.pointers}
    assert covered == {*ALGORITHMS, PBT}


@pytest.mark.parametrize("name", KNOWN_NAMES)
def test_every_name_resolves_for_every_algorithm_that_has_no_field_of_that_name(name):
    known = KNOWN_NAMES[name]
    for algorithm in ALGORITHMS:
        pointer = known.pointers.get(algorithm)
        if name in fields_of(algorithm):
            assert pointer is None, algorithm  # accepted as it is
        else:
            assert pointer is not None, f"{name} says nothing for {algorithm}"
            assert pointer.note, (name, algorithm)


def field_exists(model: Any, path: str) -> bool:
    """Whether a dotted manifest path (camelCase) names a field of `model` and the models
    below it."""
    if get_origin(model) in (Union, types.UnionType):  # X | None
        model = next(arg for arg in get_args(model) if arg is not type(None))
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return False
    by_alias = {field.alias or name: field for name, field in model.model_fields.items()}
    head, _, rest = path.partition(".")
    return head in by_alias and (not rest or field_exists(by_alias[head].annotation, rest))


def test_field_exists_can_tell():
    assert field_exists(RLJob, "spec.rolloutWorkers.envsPerWorker")
    assert not field_exists(RLJob, "spec.rolloutWorkers.envsPerWorkr")


@pytest.mark.parametrize("name", KNOWN_NAMES)
def test_every_pointer_names_a_field_that_exists(name):
    for algorithm, pointer in KNOWN_NAMES[name].pointers.items():
        if pointer.field is None:
            continue
        if algorithm == PBT:
            assert pointer.field in PBTHyperparameters.model_fields
        elif pointer.hyperparameter:
            assert pointer.hyperparameter in fields_of(algorithm), (name, algorithm)
        elif pointer.field.startswith(f"{TRAINER}."):  # the fields of its algorithm's trainer
            path = pointer.field.removeprefix(f"{TRAINER}.")
            assert field_exists(TRAINER_CONFIGS[algorithm], path), (name, algorithm)
        else:
            assert field_exists(RLJob, pointer.field), (name, algorithm)


# --- Each name, validated as a manifest ---------------------------------------------------------


@pytest.mark.parametrize("name", KNOWN_NAMES)
def test_every_known_name_is_refused_with_a_pointer_for_every_algorithm(name):
    known = KNOWN_NAMES[name]
    for algorithm in ALGORITHMS:
        if name in fields_of(algorithm):
            continue
        pointer = known.pointers[algorithm]
        message = hyperparameter_problems(algorithm, **{name: 1})[
            f"spec.trainer.hyperparameters.{name}"
        ]

        assert message.startswith(f"unknown field; this is {known.library}'s name"), message
        if pointer.field is None:
            assert f"{algorithm} has no equivalent: " in message
        else:
            field = pointer.field.replace(TRAINER, "spec.trainer")
            assert f"kuberl's is {field} (" in message
        assert "did you mean" not in message


def test_rllibs_train_batch_size_for_ppo_is_the_iterations_batch_not_a_minibatch():
    message = hyperparameter_problems("PPO", train_batch_size=4000)[
        "spec.trainer.hyperparameters.train_batch_size"
    ]

    assert message.startswith("unknown field; this is RLlib's name: kuberl's is rollout_length (")
    assert "minibatch_size" not in message
    assert "envsPerWorker x max(1, replicas)" in message


def test_sb3s_n_steps_is_the_rollout_length_on_policy_and_the_n_step_return_off_policy():
    on_policy = hyperparameter_problems("PPO", n_steps=2048)
    off_policy = hyperparameter_problems("DQN", n_steps=3)

    assert on_policy["spec.trainer.hyperparameters.n_steps"].startswith(
        "unknown field; this is Stable-Baselines3's name: kuberl's is rollout_length (env steps "
        "taken by every env of a rollout worker per sample call"
    )
    assert off_policy["spec.trainer.hyperparameters.n_steps"].startswith(
        "unknown field; this is Stable-Baselines3's name: kuberl's is n_step ("
    )


def test_names_of_other_sections_point_at_those_sections():
    problems = hyperparameter_problems("PPO", seed=1, n_envs=8, conv_filters=[[16, 3, 1]])

    assert "kuberl's is spec.trainer.seed (" in problems["spec.trainer.hyperparameters.seed"]
    assert (
        "kuberl's is spec.rolloutWorkers.envsPerWorker ("
        in (problems["spec.trainer.hyperparameters.n_envs"])
    )
    assert (
        "kuberl's is spec.trainer.model.convFilters ("
        in (problems["spec.trainer.hyperparameters.conv_filters"])
    )


def test_a_units_difference_says_how_to_convert():
    message = hyperparameter_problems("DQN", target_network_update_freq=500)[
        "spec.trainer.hyperparameters.target_network_update_freq"
    ]

    assert "kuberl's is target_update_interval (counted in gradient steps" in message
    assert "RLlib counts env steps sampled" in message


def test_a_population_points_at_its_trials_trainer():
    document = edited(
        MINIMAL,
        **{
            "spec.trainer": {
                "algorithm": PBT,
                "env": "CartPole-v1",
                "stop": {"timesteps": 1000},
                "hyperparameters": {"lr": 1e-3, "learning_rate": 1e-3, "hyperparam_mutations": {}},
                "trainer": {"algorithm": "PPO", "hyperparameters": {"n_steps": 64}},
            }
        },
    )
    with pytest.raises(InvalidManifest) as caught:
        validate_rljob(document)
    problems = {problem.path: problem.message for problem in caught.value.problems}

    assert problems["spec.trainer.hyperparameters.lr"].endswith(
        "PBT's hyperparameters are the population's, and the trials' own go in "
        "spec.trainer.trainer.hyperparameters"
    )
    assert problems["spec.trainer.hyperparameters.learning_rate"].startswith(
        "unknown field; learning_rate is a trial's hyperparameter"
    )
    assert problems["spec.trainer.hyperparameters.hyperparam_mutations"] == (
        "unknown field; this is Ray Tune's name: kuberl's is mutations (the trials' "
        "hyperparameters explore changes)"
    )
    assert problems["spec.trainer.trainer.hyperparameters.n_steps"].startswith(
        "unknown field; this is Stable-Baselines3's name: kuberl's is rollout_length ("
    )


def test_hyperparameters_written_in_the_trainer_point_into_hyperparameters():
    document = edited(MINIMAL, **{"spec.trainer.learning_rate": 1e-3, "spec.trainer.lr": 1e-3})
    with pytest.raises(InvalidManifest) as caught:
        validate_rljob(document)
    problems = {problem.path: problem.message for problem in caught.value.problems}

    assert problems["spec.trainer.learning_rate"] == (
        "unknown field; learning_rate is a hyperparameter: set "
        "spec.trainer.hyperparameters.learning_rate"
    )
    assert problems["spec.trainer.lr"] == (
        "unknown field; this is RLlib's name: kuberl's is "
        "spec.trainer.hyperparameters.learning_rate (Adam step size)"
    )


# --- Typos still get the closest spelling -------------------------------------------------------


@pytest.mark.parametrize(
    ("algorithm", "typo", "meant"),
    [
        ("PPO", "lerning_rate", "learning_rate"),
        ("PPO", "entropy_coef", "entropy_coeff"),
        ("PPO", "num_epoch", "num_epochs"),
        ("DQN", "target_update_intervals", "target_update_interval"),
        ("SAC", "learning_start", "learning_starts"),
    ],
)
def test_a_typo_still_gets_the_closest_spelling(algorithm, typo, meant):
    message = hyperparameter_problems(algorithm, **{typo: 1})[
        f"spec.trainer.hyperparameters.{typo}"
    ]

    assert message == f"unknown field; did you mean {meant!r}?"


def test_a_camel_case_name_gets_its_snake_case_spelling_first():
    message = hyperparameter_problems("PPO", learningRate=1e-3)[
        "spec.trainer.hyperparameters.learningRate"
    ]

    assert message == "unknown field; did you mean 'learning_rate'? (these fields are snake_case)"


def test_a_name_nobody_uses_lists_the_fields():
    message = hyperparameter_problems("A2C", zzz=1)["spec.trainer.hyperparameters.zzz"]

    assert message.startswith("unknown field; allowed here: learning_rate, hidden_sizes")


def test_no_hint_for_an_algorithms_own_field():
    assert known_name_hint("train_batch_size", "IMPALA") is None
    assert known_name_hint("batch_size", "DQN") is None
    assert known_name_hint("not_a_known_name", "PPO") is None


def test_names_mapped_to_a_field_are_the_other_libraries_names_for_it():
    assert names_mapped_to("learning_rate", "PPO") == ["lr", "stepsize"]
    assert "vf_coef" in names_mapped_to("vf_coeff", "PPO")
    assert "vf_loss_coeff" in names_mapped_to("vf_coeff", "PPO")
    assert "train_batch_size" in names_mapped_to("batch_size", "DQN")
    assert "minibatch_size" not in names_mapped_to("minibatch_size", "PPO")  # its own name


# --- The names are the libraries' own -----------------------------------------------------------

# RLlib's names before its new API stack (they are still what most tutorials and tuned examples
# use), and those of its ES, which has left Ray for rllib_contrib.
RLLIB_FORMER_NAMES = {
    "num_sgd_iter",
    "num_workers",
    "num_envs_per_worker",
    "lambda",
    "stepsize",
}


def test_stable_baselines3_names_are_parameters_of_stable_baselines3():
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.policies import ActorCriticPolicy

    parameters = {
        name
        for callable_ in (
            sb3.PPO.__init__,
            sb3.A2C.__init__,
            sb3.DQN.__init__,
            sb3.SAC.__init__,
            sb3.PPO.learn,
            ActorCriticPolicy.__init__,
        )
        for name in inspect.signature(callable_).parameters
    }
    names = {known.name for known in KNOWN_NAMES.values() if SB3 in known.library}

    not_sb3s = names - parameters
    assert not not_sb3s, not_sb3s


def test_rllib_names_are_settings_of_rllib():
    pytest.importorskip("ray.rllib")
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.algorithms.impala import IMPALAConfig
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.algorithms.sac import SACConfig
    from ray.rllib.models import MODEL_DEFAULTS

    settings = set(MODEL_DEFAULTS) | {
        spelling  # and without the underscore of those behind a property (_train_batch_size...)
        for config in (PPOConfig, DQNConfig, IMPALAConfig, APPOConfig, SACConfig)
        for name in vars(config())
        for spelling in (name, name.lstrip("_"))
    }
    names = {known.name for known in KNOWN_NAMES.values() if RLLIB in known.library}

    not_rllibs = names - settings - RLLIB_FORMER_NAMES
    assert not not_rllibs, not_rllibs
    assert names >= RLLIB_FORMER_NAMES


def test_every_name_says_whose_it_is():
    libraries = {SB3, RLLIB, f"{SB3} and {RLLIB}", RL_ZOO, RAY_TUNE}

    assert {known.library for known in KNOWN_NAMES.values()} <= libraries


def test_a_population_points_names_of_other_sections_at_its_own():
    assert known_name_hint("seed", PBT) == (
        "unknown field; this is Stable-Baselines3 and RLlib's name: kuberl's is spec.trainer.seed "
        "(seed of envs, networks and exploration)"
    )
    assert "kuberl's is spec.rolloutWorkers.replicas (" in known_name_hint("num_env_runners", PBT)


def test_the_algorithm_references_examples_are_what_validation_says_for_ppo():
    page = (ROOT / "docs" / "reference" / "algorithms.md").read_text().splitlines()
    section = page[page.index("## Hyperparameters") :]
    examples = [line for line in section if line.startswith("spec.trainer.hyperparameters.")]
    names = [line.split(":")[0].rsplit(".", 1)[1] for line in examples]

    assert len(examples) == 3
    problems = hyperparameter_problems("PPO", **dict.fromkeys(names, 1))
    assert examples == [f"{path}: {message}" for path, message in problems.items()]
