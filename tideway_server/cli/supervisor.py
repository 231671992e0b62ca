"""Keeps the processes of a local deployment (`tideway up`) running.

A process that exits (a broker killed by the OOM killer, a crash) is started
again with the same command line, environment and log file, after a pause
that doubles with each exit in a row (1 s up to 30 s) and starts over once it
has run for a minute. Each exit and restart is one line on stderr, so the
operator sees what happened; the others keep serving meanwhile, as they
would in a cluster.

Every process runs in a process group of its own (`start_new_session`), so a
terminal's Ctrl-C reaches only `tideway up`, which stops them in order
(`stop`), and what a process started (a Celery pool process, the JVM of a
Spark job) is killed with it if it outlives it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Supervisor"]

BACKOFF_INITIAL_S = 1.0
BACKOFF_MAX_S = 30.0
HEALTHY_AFTER_S = 60.0  # a process that ran this long starts its backoff over
STOP_TIMEOUT_S = 30.0  # a Celery worker finishes its task first (a Spark job takes seconds)


@dataclass
class _Supervised:
    name: str
    process: subprocess.Popen
    started: float = field(default_factory=time.monotonic)
    exits_in_a_row: int = 0
    restart_at: float | None = None
    restarts: int = 0


class Supervisor:
    def __init__(self, processes: list[tuple[str, subprocess.Popen]], logs: Path, *, out=sys.stderr) -> None:
        self._entries = [_Supervised(name, process) for name, process in processes]
        self._logs = logs
        self._out = out

    @property
    def processes(self) -> list[tuple[str, subprocess.Popen]]:
        return [(entry.name, entry.process) for entry in self._entries]

    def poll(self, now: float | None = None) -> None:
        """Notice exits and start what is due; call it every fraction of a second."""
        now = time.monotonic() if now is None else now
        for entry in self._entries:
            if entry.restart_at is None and entry.process.poll() is not None:
                ran_s = now - entry.started
                entry.exits_in_a_row = 1 if ran_s >= HEALTHY_AFTER_S else entry.exits_in_a_row + 1
                delay = min(BACKOFF_INITIAL_S * 2 ** (entry.exits_in_a_row - 1), BACKOFF_MAX_S)
                entry.restart_at = now + delay
                self._say(f"{entry.name} exited with {entry.process.returncode} after {ran_s:.1f}s; restarting in "
                          f"{delay:.0f}s (see {self._log_path(entry.name)})")
            elif entry.restart_at is not None and now >= entry.restart_at:
                self._restart(entry, now)

    def _restart(self, entry: _Supervised, now: float) -> None:
        log_file = open(self._log_path(entry.name), "ab")  # noqa: SIM115 - the child owns it
        try:
            entry.process = subprocess.Popen(entry.process.args, stdout=log_file, stderr=subprocess.STDOUT,
                                             start_new_session=True)
        finally:
            log_file.close()
        entry.started, entry.restart_at = now, None
        entry.restarts += 1
        self._say(f"{entry.name} restarted (pid {entry.process.pid}, restart {entry.restarts})")

    def stop(self, *, last: tuple[str, ...] = ("redis",), timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM every process, the newest first, and wait; then the ``last`` ones (the Celery
        workers use Redis while they stop). A process still running after ``timeout_s`` is killed,
        and so is whatever is left of its process group."""
        first_wave = [entry for entry in reversed(self._entries) if entry.name not in last]
        for wave in (first_wave, [entry for entry in self._entries if entry.name in last]):
            for entry in wave:
                if entry.process.poll() is None:
                    entry.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            for entry in wave:
                try:
                    entry.process.wait(max(deadline - time.monotonic(), 0))
                except subprocess.TimeoutExpired:
                    self._say(f"{entry.name} did not stop in {timeout_s:.0f}s; killing it")
                try:
                    os.killpg(entry.process.pid, signal.SIGKILL)  # the process if it is still there, and its children
                except (ProcessLookupError, PermissionError):
                    pass
                entry.process.wait()

    def _log_path(self, name: str) -> Path:
        return self._logs / f"{name}.log"

    def _say(self, line: str) -> None:
        print(f"tideway up: {line}", file=self._out, flush=True)
