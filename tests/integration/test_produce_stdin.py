"""`tideway produce` reads stdin whatever it is: a file, a pipe, a terminal (issue 15: a file aborted the process)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time

from tests.harness.processes import REPO_ROOT, run_cli


def _consumed(broker, topic: str, count: int) -> list[bytes]:
    out = run_cli("consume", "--bootstrap", broker.bootstrap, "--topic", topic, "--from", "earliest", "--max", str(count),
                  "--idle-exit-ms", "5000")
    assert out.returncode == 0, out.stderr
    return out.stdout.split(b"\n")[:-1]


def test_produce_reads_every_line_of_a_file(broker, tmp_path):
    assert run_cli("topics", "create", "--bootstrap", broker.bootstrap, "from-file").returncode == 0
    lines = [b"line %d" % i for i in range(20_000)] + [b"", b"last line without a newline"]
    path = tmp_path / "input.txt"
    path.write_bytes(b"\n".join(lines))
    with open(path, "rb") as stdin:
        out = subprocess.run([sys.executable, "-m", "tideway_server.cli.main", "produce", "--bootstrap", broker.bootstrap,
                              "--topic", "from-file", "--acks", "all"], cwd=REPO_ROOT, stdin=stdin, capture_output=True,
                             timeout=120)
    assert out.returncode == 0 and b"produced 20002 of 20002" in out.stderr, out.stderr
    assert _consumed(broker, "from-file", len(lines)) == lines


def test_produce_reads_every_line_of_a_pipe(broker):
    assert run_cli("topics", "create", "--bootstrap", broker.bootstrap, "from-pipe").returncode == 0
    lines = [b"piped %d" % i for i in range(5_000)]
    out = run_cli("produce", "--bootstrap", broker.bootstrap, "--topic", "from-pipe", input_bytes=b"\n".join(lines) + b"\n")
    assert out.returncode == 0 and b"produced 5000 of 5000" in out.stderr, out.stderr
    assert _consumed(broker, "from-pipe", len(lines)) == lines


def test_produce_reads_lines_typed_at_a_terminal(broker):
    assert run_cli("topics", "create", "--bootstrap", broker.bootstrap, "from-tty").returncode == 0
    controller, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "tideway_server.cli.main", "produce", "--bootstrap", broker.bootstrap,
                                "--topic", "from-tty"], cwd=REPO_ROOT, stdin=terminal, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env={**os.environ, "TIDEWAY_LOG_LEVEL": "WARNING"})
    os.close(terminal)
    try:
        for line in (b"typed one\n", b"typed two\n"):
            os.write(controller, line)
            time.sleep(0.2)
        os.write(controller, b"\x04")  # Ctrl-D at the start of a line: end of input
        _, stderr = process.communicate(timeout=60)
    finally:
        os.close(controller)
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0 and b"produced 2 of 2" in stderr, stderr
    assert _consumed(broker, "from-tty", 2) == [b"typed one", b"typed two"]
