"""`tideway up`, `tideway cluster status` and the CLI against a whole local deployment (issue 3)."""

import json
import os
import signal
import subprocess
import sys
import time

from tests.conftest import REPO_ROOT, free_port, run_cli, wait_for_port


def free_port_run(count: int, *, also_plus: int, avoid: set[int]) -> int:
    """A port p with p..p+count-1 and the same plus ``also_plus`` all free now."""
    import socket

    for _ in range(200):
        base = free_port()
        wanted = [base + i for i in range(count)] + [base + i + also_plus for i in range(count)]
        if any(p in avoid or p > 65535 for p in wanted):
            continue
        try:
            sockets = []
            for port in wanted:
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
        return base
    raise RuntimeError("no run of free ports found")


def test_up_runs_a_cluster_that_status_and_the_cli_can_use(tmp_path):
    controller_port = free_port()
    api_port = free_port()
    redis_port = free_port()
    first = free_port_run(3, also_plus=1000, avoid={controller_port, api_port, redis_port})  # brokers and their metrics ports
    env = {**os.environ, "TIDEWAY_HOME": str(tmp_path / "home"), "TIDEWAY_LOG_LEVEL": "INFO"}
    env.pop("DATABASE_URL", None)
    env.pop("TIDEWAY_REDIS_URL", None)  # `up` starts its own Redis
    up = subprocess.Popen(
        [sys.executable, "-m", "tideway_cli.main", "up", "--controller-port", str(controller_port), "--first-broker-port", str(first),
         "--api-port", str(api_port), "--redis-port", str(redis_port)],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        for port in (controller_port, first, first + 1, first + 2):
            wait_for_port(port, timeout_s=60, process=up)
        deployment = json.loads((tmp_path / "home" / "deployment.json").read_text())
        bootstrap = deployment["bootstrap"]
        status = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status = subprocess.run([sys.executable, "-m", "tideway_cli.main", "cluster", "status"], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
            if status.stdout.count(" alive") == 3:
                break
            time.sleep(0.3)
        assert status.stdout.count(" alive") == 3, status.stdout + status.stderr

        created = run_cli("topics", "create", "--bootstrap", bootstrap, "demo", "--partitions", "3", "--replication-factor", "3")
        assert created.returncode == 0, created.stderr
        lines = b"".join(b"line %d\n" % i for i in range(3000))
        produced = run_cli("produce", "--bootstrap", bootstrap, "--topic", "demo", "--acks", "all", input_bytes=lines)
        assert produced.returncode == 0 and b"produced 3000 of 3000" in produced.stderr, produced.stderr
        consumed = run_cli("consume", "--bootstrap", bootstrap, "--topic", "demo", "--from", "earliest", "--max", "3000")
        assert sorted(consumed.stdout.split(b"\n")[:-1]) == sorted(lines.split(b"\n")[:-1])

        # Through a broker instead of $TIDEWAY_HOME: its metadata names the controller.
        status = subprocess.run(
            [sys.executable, "-m", "tideway_cli.main", "cluster", "status", "--bootstrap", bootstrap.split(",")[1]],
            cwd=REPO_ROOT, env={**env, "TIDEWAY_HOME": str(tmp_path / "elsewhere")}, capture_output=True, text=True,
        )
        assert status.returncode == 0, status.stderr
        partition_lines = [line for line in status.stdout.splitlines() if line.strip().startswith("demo-")]
        assert len(partition_lines) == 3
        assert all("isr [" in line and "leader " in line and "hw " in line and "leo " in line for line in partition_lines)
        total_leo = sum(int(line.split("leo ")[1]) for line in partition_lines)
        assert total_leo == 3000

        # The REST API serves the demo tenant, whose key `up` printed and saved.
        import httpx

        wait_for_port(api_port, timeout_s=60, process=up)
        saved_key = tmp_path / "home" / "demo-api-key"
        deadline = time.monotonic() + 60
        while not saved_key.exists() and time.monotonic() < deadline:  # written once the demo queue exists
            time.sleep(0.2)
        key = saved_key.read_text().strip()
        with httpx.Client(base_url=f"http://127.0.0.1:{api_port}", headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
            created = api.post("/api/v1/queues/", json={"name": "jobs", "partitions": 2})
            assert created.status_code == 201, created.text
            assert created.json()["replication_factor"] == 3 and created.json()["cluster"] == "local"
            assert [q["name"] for q in api.get("/api/v1/queues/").json()] == ["demo", "jobs"]
            # The README's quick start: publish to the demo queue, receive and ack over REST.
            published = api.post("/api/v1/queues/demo/messages", json={"messages": [{"value": "hello"}]})
            assert published.status_code == 200, published.text
            received = api.post("/api/v1/queues/demo/groups/quickstart/receive", json={"wait_seconds": 5}).json()["messages"]
            assert [m["value"] for m in received] == ["hello"]
            assert api.post("/api/v1/queues/demo/groups/quickstart/ack", json={"receipts": [received[0]["receipt"]]}).status_code == 200
            # The Celery worker runs jobs (a redrive of an empty dead-letter queue moves nothing).
            job = api.post("/api/v1/queues/demo/dead-letters/redrive", json={}).json()
            deadline = time.monotonic() + 30
            while (state := api.get(job["status_url"]).json())["state"] != "SUCCESS" and time.monotonic() < deadline:
                time.sleep(0.2)
            assert state == {"job_id": job["job_id"], "state": "SUCCESS", "moved": 0}
    finally:
        up.send_signal(signal.SIGINT)
        output = up.communicate(timeout=60)[0].decode()
    assert up.returncode == 0, output
    assert "stopped" in output
    assert "demo tenant 'demo' with queue 'demo', API key tw_" in output
    for i in (1, 2, 3):  # every broker shut down cleanly (flushed, checkpointed)
        assert (tmp_path / "home" / f"broker-{i}" / ".clean-shutdown").exists()
    assert not (tmp_path / "home" / "deployment.json").exists()
