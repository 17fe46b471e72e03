"""Rollout workers, the paper's policy evaluators: a worker steps its envs with its copy of the
policy and returns sample batches (`rollout_worker`); the set of a job's workers on Ray, replaced
when lost (`worker_set`); what their actors ask of the Ray cluster (`resources`); and where a wait
on them gives way to a stop signal (`interrupt`)."""
