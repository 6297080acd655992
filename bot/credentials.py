"""The bot's credentials (its GitHub token and its webhook secret): read once, held by this process alone, and
out of reach of the programs it benchmarks.

Each credential comes from the first of: its variable (``PERFBOT_TOKEN`` or ``GITHUB_TOKEN``;
``PERFBOT_WEBHOOK_SECRET``), a file named by that variable with ``_FILE`` appended (``PERFBOT_TOKEN_FILE``:
its first line), or a credential helper named with ``_COMMAND`` (``PERFBOT_TOKEN_COMMAND="pass show ci/bot"``:
run without a shell, the first line it prints). :func:`secure`, called once when the process starts, reads
them, registers them for redaction (:mod:`bot.redact`), and then puts them out of reach of every other
process, benchmarked code included:

- each variable is removed from the environment, and its value overwritten with zero bytes where it lies in
  the process's memory: ``/proc/<pid>/environ`` shows the block the process was started with, whatever
  ``os.environ`` says later, so removing the variable alone would leave the value readable there;
- the process is made non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``): ``/proc/<pid>/environ``, ``mem`` and
  ``fd`` become unreadable, and ``ptrace`` impossible, for other processes of the same user (root's
  ``CAP_SYS_PTRACE`` still reads them: run the bot as an ordinary user).

Programs the bot starts get an environment without them (:data:`benchmarks.runner.BOT_CREDENTIALS`); git
gets the token only for a fetch or a push (:meth:`bot.trackers.github.GitHubTracker.git_environment`).
"""

from __future__ import annotations

import ctypes
import logging
import os
import shlex
import subprocess
from collections.abc import Mapping, MutableMapping
from pathlib import Path

from bot.errors import BadInput
from bot.redact import register_secret

log = logging.getLogger(__name__)

TOKEN = "token"
WEBHOOK_SECRET = "webhook secret"
# Where each credential is looked for, in order.
VARIABLES: dict[str, tuple[str, ...]] = {
    TOKEN: ("PERFBOT_TOKEN", "GITHUB_TOKEN"),
    WEBHOOK_SECRET: ("PERFBOT_WEBHOOK_SECRET",),
}
FILE_SUFFIX, COMMAND_SUFFIX = "_FILE", "_COMMAND"
HELPER_TIMEOUT_S = 30.0
_PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 3, 4

# The credentials :func:`secure` read from this process's environment.
_held: dict[str, str] = {}


def read(env: Mapping[str, str]) -> dict[str, str]:
    """Every credential ``env`` gives, by name (:data:`TOKEN`, :data:`WEBHOOK_SECRET`), read from its
    variable, file or helper; an unreadable file or a failing helper is bad input."""
    found = {}
    for name, variables in VARIABLES.items():
        value = _first(env, variables)
        if value:
            found[name] = value
    return found


def get(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The credential ``name``: from ``env`` when it gives one (a test's mapping, an event's), else the one
    :func:`secure` read from this process's environment at start."""
    given = read(env) if env is not None and env is not os.environ else {}
    return given.get(name) or _held.get(name) or read(os.environ).get(name)


def secure(env: MutableMapping[str, str] | None = None) -> None:
    """Read this process's credentials once and put them out of reach (see the module docstring)."""
    env = os.environ if env is None else env
    _held.clear()
    _held.update(read(env))
    for value in _held.values():
        register_secret(value)
    for variables in VARIABLES.values():
        for variable in variables:
            for name in (variable, variable + FILE_SUFFIX, variable + COMMAND_SUFFIX):
                if name in env:
                    _erase(env, name)
    make_non_dumpable()


def make_non_dumpable() -> bool:
    """``prctl(PR_SET_DUMPABLE, 0)`` for this process; False where the system has no such call."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        log.warning("could not make this process non-dumpable: other processes of this user can read it")
        return False


def is_dumpable() -> bool:
    """Whether other processes of this user may read this one's memory and ``/proc`` files."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) != 0
    except (OSError, AttributeError):
        return True


def _first(env: Mapping[str, str], variables: tuple[str, ...]) -> str | None:
    for variable in variables:
        if env.get(variable):
            return env[variable].strip()
        if env.get(variable + FILE_SUFFIX):
            return _from_file(variable + FILE_SUFFIX, env[variable + FILE_SUFFIX])
        if env.get(variable + COMMAND_SUFFIX):
            return _from_helper(variable + COMMAND_SUFFIX, env[variable + COMMAND_SUFFIX])
    return None


def _from_file(variable: str, path: str) -> str:
    try:
        value = Path(path).read_text(encoding="utf-8").split("\n", 1)[0].strip()
    except (OSError, UnicodeDecodeError) as error:
        raise BadInput(
            f"{variable}: cannot read {path}: {getattr(error, 'strerror', None) or error}"
        ) from error
    if not value:
        raise BadInput(f"{variable}: {path} is empty; its first line is the credential")
    return value


def _from_helper(variable: str, command: str) -> str:
    try:
        argv = shlex.split(command)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=HELPER_TIMEOUT_S, check=False)
    except (ValueError, OSError, subprocess.TimeoutExpired) as error:
        raise BadInput(f"{variable}: cannot run the credential helper: {type(error).__name__}") from error
    value = done.stdout.split("\n", 1)[0].strip()
    if done.returncode != 0 or not value:
        raise BadInput(
            f"{variable}: the credential helper exited {done.returncode} without printing a credential"
        )
    return value


def _erase(env: MutableMapping[str, str], name: str) -> None:
    """Remove ``name`` from ``env``; for the process environment, first overwrite its value with zero bytes
    where the C library keeps it (the block ``/proc/<pid>/environ`` reads)."""
    if env is os.environ:
        try:
            libc = ctypes.CDLL(None)
            libc.getenv.restype = ctypes.c_void_p
            address = libc.getenv(os.fsencode(name))
            if address:
                ctypes.memset(address, 0, len(ctypes.string_at(address)))
        except (OSError, AttributeError):
            log.warning("could not overwrite %s in this process's memory", name)
    del env[name]
