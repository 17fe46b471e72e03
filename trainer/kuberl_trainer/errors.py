"""Errors the user can fix: the message says what is wrong and what to do. Anything else
escaping the driver is a bug and keeps its traceback."""


class TrainingError(Exception):
    """The job cannot run as configured."""


class InvalidJobError(TrainingError):
    """The job can never run as specified, so retrying it changes nothing: an unknown env id, an
    unsupported space, a resource request larger than the job's Ray cluster will ever offer.
    `kuberl train` exits with EXIT_INVALID_JOB, and the operator fails the job at once."""


class IncompatibleCheckpointError(InvalidJobError):
    """The checkpoint to resume holds a network of other shapes than the job's (its hidden sizes
    or model changed since): resuming cannot load it, and retrying changes nothing."""
