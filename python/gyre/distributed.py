"""gyre as a torch.distributed backend.

    import torch.distributed as dist
    import gyre.distributed                       # registers the "gyre" backend
    dist.init_process_group("gyre", init_method="file:///tmp/rdv", rank=r, world_size=n)

Rendezvous goes through the store torch hands over (file://, tcp://, env://), or through
gyre's own job when the program runs under gyrerun. The timeout given to
init_process_group becomes gyre's progress timeout: a stalled or dead rank raises, on every
rank, gyre's verdict naming it. configure() sets deterministic reduction and the algorithm
for the process groups created afterwards.
"""
import datetime
import os
import re

import torch.distributed as dist

from gyre._gyre import GyreError  # noqa: F401  (registers the exception translator)
from gyre import _gyre_torch

ProcessGroupGyre = _gyre_torch.ProcessGroupGyre


def _env_switch(name):
    # As the C++ layer reads it: unset or empty is off; 0/false, 1/true; anything else an error.
    value = os.environ.get(name, "")
    if value in ("", "0", "false"):
        return False
    if value in ("1", "true"):
        return True
    raise ValueError('%s="%s" is not 0, 1, false or true' % (name, value[:64]))


def _env_timeout_ms(name):
    # Unset or empty: None; else a whole number of milliseconds from 1 to 1e12.
    value = os.environ.get(name, "")
    if value == "":
        return None
    if not re.fullmatch(r"[0-9]+", value) or not 1 <= int(value) <= 10**12:
        raise ValueError('%s="%s" is not a whole number from 1 to 1000000000000'
                         % (name, value[:64]))
    return int(value)


_settings = {
    "deterministic": _env_switch("GYRE_DETERMINISTIC"),
    "algorithm": os.environ.get("GYRE_ALGORITHM", ""),
    "use_gyre_environment": True,
}


def configure(deterministic=None, algorithm=None, use_gyre_environment=None):
    """Options for the gyre process groups created from now on."""
    if deterministic is not None:
        # Refused by name, not taken for its truth: 5 is no way to say True.
        if not (isinstance(deterministic, bool)
                or (isinstance(deterministic, int) and deterministic in (0, 1))):
            raise ValueError("gyre: deterministic is %r: want None (unchanged), False or 0 "
                             "(off), True or 1 (canonical order)" % (deterministic,))
        _settings["deterministic"] = bool(deterministic)
    if algorithm is not None:
        _settings["algorithm"] = algorithm
    if use_gyre_environment is not None:
        _settings["use_gyre_environment"] = bool(use_gyre_environment)


def _progress_timeout(timeout):
    # torch's default (30 min) says nothing; under gyrerun the launcher's --timeout applies.
    env_ms = _env_timeout_ms("GYRE_TIMEOUT_MS")
    if env_ms is not None and timeout == dist.default_pg_timeout:
        return datetime.timedelta(milliseconds=env_ms)
    return timeout


def _create(store, rank, size, timeout):
    return ProcessGroupGyre(
        store, rank, size, _progress_timeout(timeout),
        deterministic=_settings["deterministic"],
        algorithm=_settings["algorithm"],
        # The same on every rank whatever groups it belongs to: torch does not call the
        # backend on ranks outside a new group, so a per-process counter would drift. The
        # PrefixStore torch hands over already keeps groups apart.
        job_id="torch",
        use_gyre_environment=_settings["use_gyre_environment"])


if not hasattr(dist.Backend, "GYRE"):
    dist.Backend.register_backend("gyre", _create)
