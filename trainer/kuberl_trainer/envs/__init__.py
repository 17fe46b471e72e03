"""Envs: making a job's vector env from its spec.trainer (`making`: gymnasium ids, wrappers, spaces
and encodings), Atari's and MuJoCo's own paths (`atari`, `mujoco_logging`), observation and reward
normalization (`normalization`), the spaces a checkpoint records (`space_record`), and which env
ids and wrappers would run code a file names (`trust`)."""
