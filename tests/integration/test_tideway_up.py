"""`tideway up`, `tideway cluster status` and the CLI against a whole local deployment (issues 3 and 14).

`up` runs here as a newcomer runs it: no secret in the environment. It
generates the deployment's cluster secret and token-signing key (mode 0600)
under $TIDEWAY_HOME, the CLI on the same machine acts as the operator through
that secret, the demo tenant's key works over the native protocol and sees
its own names, and the API runs without DEBUG and refuses tokens signed with
any other key.
"""

import json
import os
import signal
import subprocess
import sys
import time

from tests.harness.processes import REPO_ROOT, free_port, wait_for_port
from tests.harness.waiting import wait_until


def free_port_run(count: int, *, also_plus: tuple[int, ...], avoid: set[int]) -> int:
    """A port p with p..p+count-1 and the same plus each of ``also_plus`` all free now."""
    import socket

    for _ in range(200):
        base = free_port()
        wanted = [base + i + plus for plus in (0, *also_plus) for i in range(count)]
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
    redis_port = free_port()
    # The balancer and two gateways behind it (api_port + 1, + 2).
    api_port = free_port_run(3, also_plus=(), avoid={controller_port, redis_port})
    # Brokers, their internal listeners (+100), Kafka listeners (+200) and metrics ports (+1000).
    first = free_port_run(3, also_plus=(100, 200, 1000), avoid={controller_port, redis_port, *range(api_port, api_port + 3)})
    # Usage refreshed every 5 s: a Spark job of the billing worker is likely running when it stops.
    env = {**os.environ, "TIDEWAY_HOME": str(tmp_path / "home"), "TIDEWAY_LOG_LEVEL": "INFO", "TIDEWAY_USAGE_REFRESH_S": "5"}
    for name in ("DATABASE_URL", "TIDEWAY_REDIS_URL", "TIDEWAY_CLUSTER_SECRET", "TIDEWAY_API_KEY", "TIDEWAY_SECRET_KEY"):
        env.pop(name, None)  # `up` starts its own Redis and makes its own secrets

    def cli(*args: str, input_bytes: bytes | None = None, extra_env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tideway_server.cli.main", *args], cwd=REPO_ROOT, input=input_bytes,
                              capture_output=True, timeout=120, env={**env, "TIDEWAY_LOG_LEVEL": "WARNING", **(extra_env or {})})

    up = subprocess.Popen(
        [sys.executable, "-m", "tideway_server.cli.main", "up", "--controller-port", str(controller_port), "--first-broker-port", str(first),
         "--api-port", str(api_port), "--redis-port", str(redis_port), "--gateways", "2"],
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
            status = subprocess.run([sys.executable, "-m", "tideway_server.cli.main", "cluster", "status"], cwd=REPO_ROOT, env=env, capture_output=True, text=True)
            if status.stdout.count(" alive") == 3:
                break
            time.sleep(0.3)
        assert status.stdout.count(" alive") == 3, status.stdout + status.stderr

        home = tmp_path / "home"
        for secret in ("cluster-secret", "signing-key", "metrics-token"):
            assert (home / secret).stat().st_mode & 0o777 == 0o600
        # The operator's CLI on this machine: its key derives from $TIDEWAY_HOME/cluster-secret.
        created = cli("topics", "create", "--bootstrap", bootstrap, "demo", "--partitions", "3", "--replication-factor", "3")
        assert created.returncode == 0, created.stderr
        lines = b"".join(b"line %d\n" % i for i in range(3000))
        produced = cli("produce", "--bootstrap", bootstrap, "--topic", "demo", "--acks", "all", input_bytes=lines)
        assert produced.returncode == 0 and b"produced 3000 of 3000" in produced.stderr, produced.stderr
        consumed = cli("consume", "--bootstrap", bootstrap, "--topic", "demo", "--from", "earliest", "--max", "3000")
        assert sorted(consumed.stdout.split(b"\n")[:-1]) == sorted(lines.split(b"\n")[:-1])
        # Without any credentials the brokers refuse, and say how to give one.
        refused = cli("topics", "list", "--bootstrap", bootstrap, extra_env={"TIDEWAY_HOME": str(tmp_path / "elsewhere")})
        assert refused.returncode == 1 and b"SASL_AUTHENTICATION_FAILED" in refused.stderr and b"--api-key" in refused.stderr

        # Through a broker instead of $TIDEWAY_HOME: its metadata names the controller.
        operator_key = _operator_key(home)
        status = subprocess.run(
            [sys.executable, "-m", "tideway_server.cli.main", "cluster", "status", "--bootstrap", bootstrap.split(",")[1]],
            cwd=REPO_ROOT, env={**env, "TIDEWAY_HOME": str(tmp_path / "elsewhere"), "TIDEWAY_API_KEY": operator_key},
            capture_output=True, text=True,
        )
        assert status.returncode == 0, status.stderr
        partition_lines = [line for line in status.stdout.splitlines() if line.strip().startswith("demo-")]
        assert len(partition_lines) == 3
        assert all("isr [" in line and "leader " in line and "hw " in line and "leo " in line for line in partition_lines)
        total_leo = sum(int(line.split("leo ")[1]) for line in partition_lines)
        assert total_leo == 3000
        # Metrics: per-topic families to Prometheus with the token `up` wrote, none without it (issue 40).
        import httpx

        metrics_url = deployment["brokers"][0]["metrics"]
        token = (home / "metrics-token").read_text().strip()
        anonymous = httpx.get(metrics_url, timeout=10).text
        assert "tideway_request_latency_seconds" in anonymous and "topic=" not in anonymous
        assert 'topic="demo"' in httpx.get(metrics_url, headers={"Authorization": f"Bearer {token}"}, timeout=10).text

        # The REST API serves the demo tenant, whose key `up` printed and saved.
        wait_for_port(api_port, timeout_s=60, process=up)
        saved_key = tmp_path / "home" / "demo-api-key"
        wait_until(saved_key.exists, 60, "the demo key saved (once the demo queue exists)", interval_s=0.2)
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
            def succeeded() -> dict | None:
                state = api.get(job["status_url"]).json()
                return state if state["state"] == "SUCCESS" else None

            state = wait_until(succeeded, 30, "the redrive job's success", interval_s=0.2)
            assert state == {"job_id": job["job_id"], "state": "SUCCESS", "moved": 0}
            # Kafka clients reach the same queues on every broker's Kafka listener, with the same key (SASL/PLAIN).
            from confluent_kafka.admin import AdminClient

            from tests.kafka.clients import confluent_config

            assert deployment["kafka_bootstrap"] == ",".join(f"127.0.0.1:{first + i + 200}" for i in range(3))
            listed = AdminClient(confluent_config(deployment["kafka_bootstrap"], key)).list_topics(timeout=30).topics
            assert {"demo", "jobs"} <= set(listed) <= {"demo", "demo.dlq", "jobs", "jobs.dlq"}, listed  # its own names
            # No debug pages (DEBUG is off): an unknown URL answers the one JSON error shape.
            missing = api.get("/no/such/page")
            assert missing.status_code == 404 and missing.json()["code"] == "not_found"
            assert "URLconf" not in missing.text
            # Tokens: the deployment's own work; one signed with any other key (the old built-in one) does not.
            token = api.post("/api/v1/tokens", json={"ttl_seconds": 60}).json()["token"]
            assert httpx.get(f"http://127.0.0.1:{api_port}/api/v1/queues/demo/messages",
                             headers={"Authorization": f"Bearer {token}"}).status_code == 200
            for signing_key in ("development-only-not-secret", os.urandom(16).hex()):
                forged = _token_signed_with(signing_key, key.split("_")[1])
                answer = httpx.get(f"http://127.0.0.1:{api_port}/api/v1/queues/demo/messages",
                                   headers={"Authorization": f"Bearer {forged}"})
                assert answer.status_code == 401, answer.text
        # The console: the demo tenant's sign-in that `up` printed and saved.
        import re

        with httpx.Client(base_url=f"http://127.0.0.1:{api_port}", timeout=60, follow_redirects=True) as browser:
            form = browser.get("/")
            assert form.status_code == 200 and str(form.url).endswith("/console/signin?next=/console/")
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
            password = (tmp_path / "home" / "demo-password").read_text().strip()
            dashboard = browser.post("/console/signin", data={"username": "demo", "password": password,
                                                              "csrfmiddlewaretoken": token, "next": "/console/"})
            assert dashboard.status_code == 200 and str(dashboard.url).endswith("/console/"), dashboard.text[:300]
            queues = browser.get("/console/queues")
            assert "/console/queues/demo" in queues.text and "/console/queues/jobs" in queues.text
        # The demo tenant's key over the native protocol: its own names, never the broker-side ones.
        listed = cli("topics", "list", "--bootstrap", bootstrap, "--api-key", key)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.decode().split() == ["demo", "demo.dlq", "jobs", "jobs.dlq"]
        produced = cli("produce", "--bootstrap", bootstrap, "--topic", "jobs", "--acks", "all", "--api-key", key,
                       input_bytes=b"native 1\nnative 2\n")
        assert produced.returncode == 0, produced.stderr
        # Its "demo" is its queue (the REST "hello"), not the operator's topic of that name.
        own = cli("consume", "--bootstrap", bootstrap, "--topic", "demo", "--from", "earliest", "--idle-exit-ms", "2000",
                  "--api-key", key)
        assert own.returncode == 0 and own.stdout.split() == [b"hello"], own.stdout[:200] + own.stderr

        # A broker that dies is restarted; the deployment keeps serving meanwhile and afterwards.
        broker_pid = _pid_listening_on(first + 2)
        os.kill(broker_pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _pid_listening_on(first + 2) in (None, broker_pid):
            time.sleep(0.2)
        assert _pid_listening_on(first + 2) not in (None, broker_pid), "broker-3 was not restarted"
        assert up.poll() is None
        produced = cli("produce", "--bootstrap", bootstrap, "--topic", "demo", "--acks", "all",
                       input_bytes=b"after the restart\n")
        assert produced.returncode == 0, produced.stderr

        # Two gateways behind HAProxy: a gateway that dies is out of the balancer's rotation at once (the publish
        # through the balancer succeeds) and is restarted.
        assert deployment["gateways"] == [f"http://127.0.0.1:{api_port + i}" for i in (1, 2)]
        gateway_pid = _pid_listening_on(api_port + 1)
        os.kill(gateway_pid, signal.SIGKILL)
        with httpx.Client(base_url=f"http://127.0.0.1:{api_port}", headers={"Authorization": f"Bearer {key}"}, timeout=60) as api:
            for _ in range(4):
                published = api.post("/api/v1/queues/demo/messages", json={"messages": [{"value": "one gateway down"}]})
                assert published.status_code == 200, published.text
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _pid_listening_on(api_port + 1) in (None, gateway_pid):
            time.sleep(0.2)
        assert _pid_listening_on(api_port + 1) not in (None, gateway_pid), "gateway 1 was not restarted"
    finally:
        up.send_signal(signal.SIGINT)
        output = up.communicate(timeout=60)[0].decode()
    assert up.returncode == 0, output
    assert "stopped" in output
    assert "broker-3 exited with -9" in output and "broker-3 restarted (pid" in output
    assert "demo tenant 'demo' with queue 'demo', API key tw_" in output
    assert f"behind HAProxy on 127.0.0.1:{api_port}" in output
    assert "/console/   user 'demo', password in" in output
    assert "development-only" not in output and (tmp_path / "home" / "cluster-secret").read_text().strip() not in output
    for i in (1, 2, 3):  # every broker shut down cleanly (flushed, checkpointed)
        assert (tmp_path / "home" / f"broker-{i}" / ".clean-shutdown").exists()
    assert not (tmp_path / "home" / "deployment.json").exists()
    # Nothing it started outlives it: no Celery pool process, beat or Spark JVM of a worker stopped mid-job.
    assert _processes_with_home(tmp_path / "home") == []


def _processes_with_home(home) -> list[str]:
    """The command lines of live processes whose environment names ``home`` as TIDEWAY_HOME."""
    wanted = f"TIDEWAY_HOME={home}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if wanted not in environ.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                found.append(f"{pid}: " + cmdline.read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return found


def _pid_listening_on(port: int) -> int | None:
    """The pid of the process listening on 127.0.0.1:``port`` (from /proc), or None."""
    wanted = f"0100007F:{port:04X}"
    inodes = set()
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            if fields[1] == wanted and fields[3] == "0A":  # LISTEN
                inodes.add(fields[9])
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    return int(pid)
        except OSError:
            continue
    return None


def _operator_key(home) -> str:
    """The operator's service key of the deployment under ``home`` (derived from its cluster secret file)."""
    from tideway_server.brokers.security.keys import service_key

    return service_key(bytes.fromhex((home / "cluster-secret").read_text().strip()), "operator")


def _token_signed_with(signing_key: str, key_prefix: str) -> str:
    """A browser token for ``key_prefix`` as the gateway makes them, but signed with ``signing_key``."""
    from django.core.signing import JSONSerializer, TimestampSigner

    signer = TimestampSigner(key=signing_key, salt="tideway.gateway.token", fallback_keys=[])
    payload = {"k": key_prefix, "e": int(time.time()) + 10 * 365 * 24 * 3600}
    return "twt_" + signer.sign_object(payload, serializer=JSONSerializer, compress=True)


def test_tenant_create_without_a_deployment_refuses_instead_of_making_a_new_database(tmp_path):
    """Issue 15: it made a new database under the wrong TIDEWAY_HOME and printed a key that then got 401."""
    env = {**os.environ, "TIDEWAY_HOME": str(tmp_path / "nothing-here")}
    env.pop("DATABASE_URL", None)
    out = subprocess.run([sys.executable, "-m", "tideway_server.cli.main", "tenant", "create", "acme"], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "no deployment at" in out.stderr and "tideway up" in out.stderr
    assert "tw_" not in out.stdout
    assert not (tmp_path / "nothing-here" / "tideway.sqlite3").exists()
