"""kuberl's contract: what the operator, the API, the CLI and the trainer all read, with no torch,
ray or gymnasium (pyproject.toml's import-linter contracts hold it):

- `config` and `hyperparameters`: an RLJob's spec.trainer (and its rollout workers), the CRD's
  schema and `kubectl explain`'s text (`docstrings` turns field docstrings into descriptions);
- `progress_row`: the progress rows a job writes and the names of its Prometheus metrics;
- `final_record`: how `kuberl train` ends, its exit codes and its last line;
- `capacity`: what a job's Ray cluster offers, as the operator tells the driver;
- `frozen`: a config's plain copy for processes that must not import pydantic;
- `plots`: learning curves of progress rows, for the API and the CLI.
"""
