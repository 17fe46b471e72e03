"""Envs: making a job's vector env from its spec.trainer (`making`: gymnasium ids, wrappers, vector
envs), its spaces as the networks take them and the observations encoded for them (`spaces`), why
an env cannot be trained on, found when the job is validated (`problems`), Atari's and MuJoCo's
own paths (`atari`, `mujoco_logging`), observation and reward normalization (`normalization`), the
spaces a checkpoint records (`space_record`), and which env ids and wrappers would run code a file
names (`trust`)."""
