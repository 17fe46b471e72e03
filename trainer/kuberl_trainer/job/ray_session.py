"""Ray for one job's driver: joined where the job runs in a Ray cluster (the operator sets
RAY_ADDRESS), else a private local instance of the run's own, with an authentication token that
only the run's processes know; what the driver started is shut down when the run ends.

Ray is imported only here, and only when a job needs it: a job without remote workers never
imports it."""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import MutableMapping

RAY_ADDRESS = "RAY_ADDRESS"
RAY_AUTH_MODE = "RAY_AUTH_MODE"
RAY_AUTH_TOKEN = "RAY_AUTH_TOKEN"
RAY_AUTH_TOKEN_PATH = "RAY_AUTH_TOKEN_PATH"
RAY_AUTH_SETUP_LOGGER = "ray._private.authentication.authentication_token_setup"


def set_private_ray_token(environ: MutableMapping[str, str]) -> bool:
    """Give a private local Ray a token of its own, unless its authentication was chosen in
    the environment; returns whether it did.

    With RAY_AUTH_MODE unset, Ray turns token authentication on for a new local instance and
    saves the token it generates in ~/.ray/auth_token, where every user of the machine may read
    it and where it stays after the run. Given RAY_AUTH_TOKEN it saves nothing: the token is
    known to the run's own processes only (their environment) and gone with them."""
    if any(name in environ for name in (RAY_AUTH_MODE, RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH)):
        return False
    environ[RAY_AUTH_TOKEN] = secrets.token_hex(32)
    return True


class RaySession:
    """The Ray a driver uses: started or joined by `start` unless this process is in one already,
    and shut down by `shutdown` only if `start` began it."""

    def __init__(self) -> None:
        self.started = False  # this driver initialized Ray, and shuts it down
        self._token_set = False  # RAY_AUTH_TOKEN is this run's, unset again at the end

    @property
    def private(self) -> bool:
        """Whether the Ray this driver started is a local instance, whose nodes are all there
        is (no cluster will add any)."""
        return self.started and not os.environ.get(RAY_ADDRESS)

    def start(self) -> None:
        import ray

        if ray.is_initialized():
            return
        address = os.environ.get(RAY_ADDRESS)
        if address:  # inside a Ray cluster (the operator sets it): join it
            ray.init(address=address, log_to_driver=True)
        else:  # a private local instance, ended with this run; never someone else's
            self._token_set = set_private_ray_token(os.environ)
            # Ray warns on every start that it turned token authentication on; this run chose
            # it (its own token), so nothing is wrong and nothing is said.
            quiet = logging.getLogger(RAY_AUTH_SETUP_LOGGER)
            level = quiet.level
            if self._token_set:
                quiet.setLevel(logging.ERROR)
            try:
                ray.init(address="local", include_dashboard=False, log_to_driver=False)
            finally:
                quiet.setLevel(level)
        self.started = True

    def shutdown(self) -> None:
        if self.started:
            import ray

            ray.shutdown()
        if self._token_set:
            for name in (RAY_AUTH_TOKEN, RAY_AUTH_MODE):  # Ray sets the mode from the token
                os.environ.pop(name, None)
