"""Errors the user can fix: the message says what is wrong and what to do. Anything else
escaping the driver is a bug and keeps its traceback."""


class TrainingError(Exception):
    """The job cannot run as configured."""
