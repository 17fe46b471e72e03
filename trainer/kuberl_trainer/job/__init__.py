"""Running a job: the driver (`driver`) runs the training loop (`trainer`, or a PBT population:
`population`) iteration by iteration, starts or joins Ray (`ray_session`) and waits for the job's
resources (`resource_wait`), writes and resumes checkpoints (`checkpoint`, `checkpoint_format`,
`resume`), checkpoints and stops on a signal within the grace period (`preemption`), stops at a
stop condition (`outcome`) and exports the final policy (`final_export`), and reports progress
(the terminal: `progress`; Prometheus: `metrics`; TensorBoard: `tensorboard`). `algorithms` picks
an algorithm's policy and optimizer classes; `device_choice` the learner's device."""
