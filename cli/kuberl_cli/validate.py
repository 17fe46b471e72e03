"""`kuberl validate FILE|DIRECTORY...`: the whole RLJob contract checked before anything runs.

The spec and hyperparameters are checked by the operator's models; the env is then made once here
(this command has gymnasium, the operator does not) and put inside its wrappers, so an unknown id,
wrapper or wrapper keyword argument, or an unsupported space shows up now, not mid-run on a
cluster. Making the env runs code: a `module:Class` env or wrapper imports its module and calls
the class. So it is made only for a document that is an RLJob of the served apiVersion
within the parser's bounds, and never with `check_env=False` (`--no-env`, for files nobody vouches
for).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kuberl_contract.config.evaluation import noisy_evaluation_stop
from kuberl_operator.bounded import document_problems
from kuberl_operator.builders.driver import ephemeral_checkpoints
from kuberl_operator.spec import RLJob
from kuberl_operator.validation import (
    InvalidManifest,
    Problem,
    parse_yaml_document,
    read_manifest_file,
    type_meta_problems,
    validate_rljob,
)

if TYPE_CHECKING:
    from kuberl_trainer.envs.problems import EnvProblem
    from kuberl_trainer.job.checkpoint import Checkpoint

EXIT_OK, EXIT_INVALID, EXIT_NO_FILE = 0, 1, 2


MANIFEST_PATTERNS = ("*.yaml", "*.yml")
"""The files of a directory that `kuberl validate DIRECTORY` checks."""


def validate_paths(paths: list[Path], check_env: bool = True) -> int:
    """Checks every manifest `paths` name, a directory's *.yaml and *.yml files in order of name,
    and reports every problem of each in one pass (as validate_command, the valid line then
    naming the file when there are several). 0 when all are valid, else the worst exit code:
    EXIT_NO_FILE for a missing file or a directory of no manifest, EXIT_INVALID for an invalid
    one."""
    files, exit_code = [], EXIT_OK
    for path in paths:
        found = manifests_in(path)
        if not found:
            print(f"{path}: a directory of no *.yaml or *.yml file", file=sys.stderr)
            exit_code = EXIT_NO_FILE
        files += found
    several = len(files) > 1
    for file in files:
        exit_code = max(exit_code, validate_command(file, check_env, named=several))
    return exit_code


def noisy_stop(job: RLJob) -> str | None:
    """Why the job's stop on evaluation return would rest on luck, or None (see
    noisy_evaluation_stop)."""
    trainer = job.spec.trainer
    return noisy_evaluation_stop(trainer.stop.evaluation_return_mean, trainer.evaluation)


def manifests_in(path: Path) -> list[Path]:
    """[path] for a file (or a missing one, which validate_command reports), the manifests of a
    directory sorted by name."""
    if not path.is_dir():
        return [path]
    found = {file for pattern in MANIFEST_PATTERNS for file in path.glob(pattern)}
    return sorted(file for file in found if file.is_file())


def validate_command(file: Path, check_env: bool = True, named: bool = False) -> int:
    """Prints one summary line (after the file's name when `named`) and returns 0 for a valid
    job, else one line per problem and 1. `check_env=False` checks the manifest alone, importing
    and making nothing."""
    if check_env:  # a `module:Class` env next to the manifest is found, as `kuberl train` finds it
        from kuberl_trainer.envs.search_path import run_directories, search_for_envs_in

        search_for_envs_in(run_directories(file))
    job, exit_code = checked_job(file, check_env)
    if job is not None:
        print(f"{f'{file}: ' if named else ''}{job.name}: valid RLJob ({describe_job(job)})")
        if warning := ephemeral_checkpoints(job.spec):  # fine here, a loss on a cluster
            print(f"{file}: warning: on a cluster, {warning}", file=sys.stderr)
        if warning := noisy_stop(job):
            print(f"{file}: warning: {warning}", file=sys.stderr)
    return exit_code


def checked_job(file: Path, check_env: bool = True) -> tuple[RLJob | None, int]:
    """The valid job in `file` and EXIT_OK, or None and the exit code after printing, one line
    each, every problem found."""
    job, exit_code, problems = job_problems(file, check_env)
    for problem in problems:
        print(problem, file=sys.stderr)
    return job, exit_code


def job_problems(
    file: Path, check_env: bool = True, check_warm_start: bool = True
) -> tuple[RLJob | None, int, list[str]]:
    """The valid job in `file` and EXIT_OK, or None, the exit code and every problem found, each
    a line naming the file (check_document says what the checks are)."""
    document, exit_code, problems = manifest_document(file)
    if exit_code != EXIT_OK:
        return None, exit_code, problems
    return job_in_document(file, document, check_env, check_warm_start)


def manifest_document(file: Path) -> tuple[Any, int, list[str]]:
    """The manifest in `file`, parsed, and EXIT_OK; or None, the exit code and why the file holds
    none (missing, unreadable, not UTF-8, not one YAML document within the parser's bounds), in a
    line naming the file."""
    if file.is_dir() or not file.exists():
        reason = "is a directory, not a manifest" if file.is_dir() else "no such file"
        return None, EXIT_NO_FILE, [f"{file}: {reason}"]
    try:
        return parse_yaml_document(read_manifest_file(file)), EXIT_OK, []
    except InvalidManifest as exc:
        return None, EXIT_INVALID, [f"{file}: {problem}" for problem in exc.problems]
    except OSError as exc:
        return None, EXIT_NO_FILE, [f"{file}: cannot read the file: {exc.strerror or exc}"]
    except UnicodeDecodeError as exc:
        return None, EXIT_INVALID, [f"{file}: not UTF-8 text (byte {exc.start})"]


def job_in_document(
    file: Path, document: Any, check_env: bool = True, check_warm_start: bool = True
) -> tuple[RLJob | None, int, list[str]]:
    """As job_problems, for the parsed manifest of `file` (which `kuberl train` may have changed
    with --set and --seed): it is checked as it is, not written out and read again."""
    job, problems = check_document(document, check_env, check_warm_start)
    if job is None or problems:
        return None, EXIT_INVALID, [f"{file}: {problem}" for problem in problems]
    return job, EXIT_OK, []


def check_manifest(
    text: str, check_env: bool = True, check_warm_start: bool = True
) -> tuple[RLJob | None, list[Problem]]:
    """As check_document, for a manifest's YAML text (its problems when it is not YAML)."""
    try:
        document = parse_yaml_document(text)
    except InvalidManifest as exc:
        return None, exc.problems
    return check_document(document, check_env, check_warm_start)


def check_document(
    document: Any, check_env: bool = True, check_warm_start: bool = True
) -> tuple[RLJob | None, list[Problem]]:
    """The job the parsed manifest describes (None when the spec is invalid) and every problem
    found, the env's included unless `check_env` is false, and a local warmStart checkpoint's
    unless `check_warm_start` is false (`kuberl train` checks it itself with warm_start_checked,
    and keeps what it read)."""
    job, problems = None, []
    try:
        job = validate_rljob(document)
    except InvalidManifest as exc:
        problems = exc.problems
    if not check_env or not _may_make_env(document):
        return job, problems
    # Even when other fields are wrong, the env can be checked: report everything in one run.
    if problem := _env_problem(_trainer_of(document)):
        problems = [*problems, Problem(f"spec.trainer.{problem.field}", problem.message)]
    elif check_warm_start and job is not None:
        _, problem = warm_start_checked(job.spec.trainer)
        problems = problems if problem is None else [*problems, problem]
    return job, problems


def warm_start_checked(trainer: Any) -> tuple[Checkpoint | None, Problem | None]:
    """The checkpoint of spec.trainer.warmStart as read (only what a warm start takes of it:
    resume.warm_start_part), or why it cannot start this job: it names none, or its networks are
    of other shapes than a policy built for the job's env. (None, None) when the job has no warm
    start, or has it in an object store, which the driver reads with the job's credentials."""
    if trainer.warm_start is None:
        return None, None
    named = trainer.warm_start.checkpoint
    if named is None:  # warmStart.job: the API or the operator resolves it (resume.py says so)
        return None, None
    if "://" in named and not named.startswith("file://"):
        return None, None
    from kuberl_trainer.envs.making import make_vector_env
    from kuberl_trainer.envs.spaces import job_space_info
    from kuberl_trainer.errors import IncompatibleCheckpointError, InvalidJobError
    from kuberl_trainer.job.algorithms import policy_class
    from kuberl_trainer.job.checkpoint import CheckpointError
    from kuberl_trainer.job.resume import (
        WARM_START_FIELD,
        warm_start_misfit,
        warm_start_part,
        warm_start_source,
    )

    try:
        source = warm_start_part(warm_start_source(named))
    except (InvalidJobError, CheckpointError) as exc:
        message = str(exc).removeprefix(f"{WARM_START_FIELD}: ")
        return None, Problem(WARM_START_FIELD, message)
    envs = make_vector_env(trainer.env, trainer.env_config, 1, trainer.wrappers)
    try:
        policy = policy_class(trainer)(job_space_info(envs, trainer), trainer, 0)
    finally:
        envs.close()
    try:
        policy.warm_start(source.state["policy"])
    except IncompatibleCheckpointError as exc:
        message = warm_start_misfit(source, exc).removeprefix(f"{WARM_START_FIELD}: ")
        return None, Problem(WARM_START_FIELD, message)
    return source, None


def _may_make_env(document: Any) -> bool:
    """Only an RLJob of the served apiVersion, within the bounds on what a manifest may hold, gets
    its env made: a document of another kind is nobody's training job."""
    return (
        isinstance(document, dict)
        and not type_meta_problems(document)
        and not document_problems(document)
    )


def _trainer_of(document: Any) -> dict[str, Any]:
    """`spec.trainer` of a document that may be malformed anywhere ({} when it is not there)."""
    spec = document.get("spec") if isinstance(document, dict) else None
    trainer = spec.get("trainer") if isinstance(spec, dict) else None
    return trainer if isinstance(trainer, dict) else {}


def _env_problem(trainer: dict[str, Any]) -> EnvProblem | None:
    """What is wrong with the env, as the rollout workers would make and wrap it (the field under
    spec.trainer and why), or None."""
    env, env_config = trainer.get("env"), trainer.get("envConfig")
    if not isinstance(env, str) or not env:
        return None  # reported by the spec's validation
    from pydantic import TypeAdapter, ValidationError

    from kuberl_contract.config import ALGORITHMS, PBT, ModelConfig, WrapperConfig
    from kuberl_contract.config.multi_agent import MultiAgentConfig
    from kuberl_trainer.envs.problems import env_problem  # gymnasium: only imported when needed

    algorithm, where = trainer.get("algorithm"), ""
    if algorithm == PBT and isinstance(trainer.get("trainer"), dict):  # its trials' algorithm
        algorithm, where = trainer["trainer"].get("algorithm"), "trainer."
    row = ALGORITHMS.get(algorithm)  # an unknown one is the spec's problem
    inner = trainer["trainer"] if where else trainer
    try:
        wrappers = TypeAdapter(list[WrapperConfig]).validate_python(trainer.get("wrappers", []))
        model = ModelConfig.model_validate(inner.get("model", trainer.get("model", {})))
        multi_agent = TypeAdapter(MultiAgentConfig | None).validate_python(inner.get("multiAgent"))
    except ValidationError:
        return None  # reported by the spec's validation; the env is not made without them

    with warnings.catch_warnings():  # env constructors warn freely; the verdict is what counts
        warnings.simplefilter("ignore")
        problem = env_problem(
            env,
            env_config if isinstance(env_config, dict) else {},
            discrete_actions_only=row is not None and row.discrete_actions_only,
            continuous_actions_only=row is not None and row.continuous_actions_only,
            wrappers=wrappers,
            normalize_observations=_normalizes_observations(inner),
            model=model,
            images=row is None or row.image_observations,
            multi_agent=multi_agent,
        )
    if problem is not None and problem.field.startswith(("normalization.", "model.")):
        return problem._replace(field=where + problem.field)
    return problem


def _normalizes_observations(trainer: dict[str, Any]) -> bool:
    """Whether `trainer` (a population's inner trainer where that is meant) turns observation
    normalization on."""
    normalization = trainer.get("normalization")
    return isinstance(normalization, dict) and normalization.get("observations") is True


def describe_job(job: RLJob) -> str:
    """`PPO on CartPole-v1, 0 remote rollout workers x 8 envs, stop at timesteps>=100000`."""
    trainer, workers = job.spec.trainer, job.spec.rollout_workers
    noun = "worker" if workers.replicas == 1 else "workers"
    parts = [
        f"{trainer.algorithm} on {trainer.env}",
        f"{workers.replicas} remote rollout {noun} x {workers.envs_per_worker} envs"
        + (f" on {workers.spot.provider} spot" if workers.spot.enabled else ""),
    ]
    if job.spec.learner.gpus:
        gpu_type = f" {job.spec.learner.gpu_type}" if job.spec.learner.gpu_type else ""
        plural = "s" if job.spec.learner.gpus > 1 else ""
        parts.append(f"learner on {job.spec.learner.gpus}{gpu_type} GPU{plural}")
    stops = [
        f"{type(trainer.stop).model_fields[name].alias}>={_number(value)}"
        for name, value in trainer.stop
        if value is not None
    ]
    parts.append("stop at " + " or ".join(stops))
    return ", ".join(parts)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
