"""The attempt: the operator's numbered try of a job's driver (status.attempt, 1, 2, ...), as the
driver learns it.

The operator submits each attempt's driver with ATTEMPT_ENV in its environment; the driver
records it in every checkpoint and refuses to write where a newer attempt has written
(kuberl_trainer.job.fencing), so a stale driver that wakes up cannot clobber a newer one's
checkpoints. A local run has none.
"""

ATTEMPT_ENV = "KUBERL_ATTEMPT"
