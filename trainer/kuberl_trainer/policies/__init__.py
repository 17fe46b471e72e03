"""Models and policies, the paper's policy graphs: networks (`models`), the policy interface and
its torch base (`interface`, `base`, data-parallel `towers`), one module per algorithm family's
loss and postprocessing (`ppo`, `impala`, `dqn`, `sac`, `es`, ...), the action distributions
every policy acts through (`distributions`), acting without torch on a rollout worker (`acting`,
with ES's share in `evolution`), and the batches they exchange (`sample_batch`,
`postprocessing`)."""
