"""Process plumbing for the executor: spawn a workload in its own session, tell whether a
pid is still the process we started, and turn wait statuses into exit codes.

Exit codes follow the shell: a workload killed by signal N exits ``128 + N`` (SIGKILL is
137, SIGTERM 143), whether the shell wrapper saw it die or the wrapper itself was killed.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

# The wrapper outlives the workload long enough to record its exit status in a file, so
# a restarted agent learns how a workload ended while it was away. The trap keeps the
# shell alive through the catchable stop signals (they reach the workload through its
# process group; a trapped signal is reset to the default in the child), and the shell
# then writes 128+N for a workload killed by signal N.
WRAPPER = 'trap : HUP INT QUIT TERM USR1 USR2; "$@"; echo $? > "$HERD_EXIT_FILE"'
WRAPPER_NAME = "herd-alloc"
SHELL = "/bin/sh"


def find_command(command: Sequence[str], env: Mapping[str, str]) -> str | None:
    """Why ``command`` cannot start, or None if its program is there and executable."""
    if not command or not command[0]:
        return "empty command"
    if shutil.which(command[0], path=env.get("PATH", os.defpath)) is None:
        return f"cannot start {command[0]!r}: not found or not executable"
    return None


def spawn(command: Sequence[str], env: Mapping[str, str], log_path: Path) -> int:
    """Start ``command`` under the wrapper in a new session (its pid is the process group
    id), stdin from /dev/null, stdout and stderr appended to ``log_path``. Returns the pid.

    ``posix_spawn`` rather than ``Popen``: the executor reaps by pid itself, so a workload
    that outlives this agent leaves no ``Popen`` object behind to complain when collected.
    """
    file_actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log_path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    return os.posix_spawn(
        SHELL, [SHELL, "-c", WRAPPER, WRAPPER_NAME, *command], dict(env),
        file_actions=file_actions, setsid=True, setsigmask=(),
        # Python ignores these; a workload must start with the defaults.
        setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) from /proc/<pid>/stat, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    # Field 2 (comm) may hold spaces and parentheses: split after its last ')'.
    fields = raw[raw.rfind(")") + 2:].split()
    try:
        return fields[0], int(fields[19])   # fields 3 and 22 of proc(5)
    except (IndexError, ValueError):
        return None


def start_time(pid: int) -> int | None:
    stat = proc_stat(pid)
    return stat[1] if stat else None


def is_alive(pid: int, started: int | None) -> bool:
    """Whether ``pid`` runs and is the process that started at ``started`` (not a zombie,
    not a reused pid). Without /proc, a successful ``kill(pid, 0)`` is all we can check."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False     # someone else's process: the pid was reused
    stat = proc_stat(pid)
    if stat is None:
        return True
    state, ticks = stat
    if state in ("Z", "X"):
        return False
    return started is None or ticks == started


def reap(pid: int) -> tuple[bool, int | None] | None:
    """(exited, exit code) of a child of this process, without blocking; None when ``pid``
    is not our child (a workload adopted from an earlier agent): ask ``is_alive``."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    if done == 0:
        return False, None
    return True, shell_code(os.waitstatus_to_exitcode(status))


def shell_code(returncode: int) -> int:
    """A negative returncode (killed by signal N) as the shell reports it: 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def read_exit_file(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def exit_reason(code: int) -> str:
    if 128 < code <= 128 + 64:
        try:
            return f"killed by {signal.Signals(code - 128).name}"
        except ValueError:
            pass
    if code == 126:
        return "exit 126 (command not executable)"
    if code == 127:
        return "exit 127 (command not found)"
    return f"exit {code}"


def parse_signal(name: str) -> signal.Signals | None:
    """``SIGUSR1``, ``USR1`` or ``10``; None if it names no signal."""
    text = name.strip().upper()
    try:
        return signal.Signals(int(text))
    except ValueError:
        pass
    try:
        return signal.Signals[text if text.startswith("SIG") else f"SIG{text}"]
    except KeyError:
        return None


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Signal a whole process group; False if it is gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True
