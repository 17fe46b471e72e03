"""kuberl's trainer: the engine that trains an RLJob's spec.trainer (kuberl_contract), in rooms
that import only downwards (pyproject.toml's import-linter contract holds the order):

- `trained`: using a trained policy: load, act, evaluate, export, record videos;
- `job`: running a job: the driver, the training loop, checkpoints, resuming, PBT, the reports;
- `optimizers`: the policy optimizers, the paper's execution strategies, and their replay;
- `rollouts`: the rollout workers (the paper's policy evaluators) and the set of them on Ray;
- `policies`: models and policies, the paper's policy graphs: networks, losses, postprocessing;
- `envs`: making envs (gymnasium, Atari, MuJoCo), their wrappers, spaces and normalization.

`errors` (what a user can fix) and `cpu_quota` (the CPUs this process may use) serve them all.
"""
