"""`tideway up` keeps its processes running: an exit is logged and restarted after a growing pause."""

import io
import subprocess
import sys

from tideway_server.cli.supervisor import BACKOFF_MAX_S, HEALTHY_AFTER_S, Supervisor


def _crashing() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])


def _wait_exit(supervisor: Supervisor) -> None:
    for _name, process in supervisor.processes:
        process.wait(30)


def test_a_process_that_keeps_exiting_is_restarted_with_doubling_pauses_up_to_a_ceiling(tmp_path):
    out = io.StringIO()
    supervisor = Supervisor([("broker-1", _crashing())], tmp_path, out=out)
    now, pauses = 0.0, []
    for _ in range(7):
        _wait_exit(supervisor)
        supervisor.poll(now)  # notices the exit
        pauses.append(float(out.getvalue().splitlines()[-1].split("restarting in ")[1].split("s")[0]))
        now += pauses[-1]
        supervisor.poll(now)  # due: restarted
        assert "broker-1 restarted" in out.getvalue().splitlines()[-1]
    assert pauses == [1, 2, 4, 8, 16, BACKOFF_MAX_S, BACKOFF_MAX_S]
    assert "broker-1 exited with 3" in out.getvalue()
    assert (tmp_path / "broker-1.log").exists()

    # After running long enough, the next exit starts from the shortest pause again.
    _wait_exit(supervisor)
    supervisor.poll(now + HEALTHY_AFTER_S + 1)
    assert "restarting in 1s" in out.getvalue().splitlines()[-1]
    supervisor.processes[0][1].wait(30)


def test_running_processes_are_left_alone(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        out = io.StringIO()
        supervisor = Supervisor([("api", sleeper)], tmp_path, out=out)
        supervisor.poll(0.0)
        supervisor.poll(100.0)
        assert out.getvalue() == "" and supervisor.processes[0][1] is sleeper
    finally:
        sleeper.kill()
        sleeper.wait()


_WORKER = r"""
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # a pool process, a Spark JVM
print(child.pid, flush=True)
def stop(*_):
    open(sys.argv[1], "a").write("billing\n")
    sys.exit(0)  # at once, leaving its child behind
signal.signal(signal.SIGTERM, stop)
time.sleep(60)
"""
_REDIS = r"""
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (open(sys.argv[1], "a").write("redis\n"), sys.exit(0)))
print(flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_stop_leaves_no_process_behind_and_stops_redis_last(tmp_path):
    stops = tmp_path / "stops"
    worker = subprocess.Popen([sys.executable, "-c", _WORKER, str(stops)], stdout=subprocess.PIPE, start_new_session=True)
    grandchild = int(worker.stdout.readline())
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                 "print(flush=True); time.sleep(60)"], stdout=subprocess.PIPE, start_new_session=True)
    stubborn.stdout.readline()  # SIGTERM is ignored from here on
    redis = subprocess.Popen([sys.executable, "-c", _REDIS, str(stops)], stdout=subprocess.PIPE, start_new_session=True)
    redis.stdout.readline()
    out = io.StringIO()
    supervisor = Supervisor([("redis", redis), ("billing", worker), ("api", stubborn)], tmp_path, out=out)
    supervisor.stop(timeout_s=1)
    assert worker.returncode == 0 and stubborn.returncode == -9 and redis.returncode == 0
    assert stops.read_text().split() == ["billing", "redis"]  # the Celery workers use Redis while they stop
    assert not _alive(grandchild), "the worker's child outlived it"
    assert out.getvalue().splitlines() == ["tideway up: api did not stop in 1s; killing it"]
