"""kuberl's Python API: train an RLJob as `kuberl train` does, and load the policy it trained.

    import kuberl

    run = kuberl.train("job.yaml", trainer__stop__iterations=5)   # or a manifest as a dict
    print(run.record.episode_return_mean, run.run_dir)
    policy = kuberl.load(run.run_dir)                               # its newest checkpoint
    print(policy.evaluate(episodes=10).summary())

`train` shows a one-line progress bar (`progress=False` silences it) and returns a `TrainedRun`:
the run's final record (`kuberl_contract.final_record.FinalRecord`) and its run directory. An
invalid manifest or override raises `JobError` naming the field; a run that fails raises
`TrainingFailed`.
"""

from kuberl.training import JobError, TrainingFailed, train
from kuberl_cli.train import TrainedRun
from kuberl_trainer.trained.inference import load

__all__ = ["JobError", "TrainedRun", "TrainingFailed", "load", "train"]
