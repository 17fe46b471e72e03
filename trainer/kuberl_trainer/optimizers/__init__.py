"""Policy optimizers: the execution strategy, swappable under unchanged policies."""
