"""Time a message's way through the processes: put this directory on PYTHONPATH and set TIDEWAY_STAGE_LOG.

    rm -rf /tmp/stages; TIDEWAY_STAGE_LOG=/tmp/stages PYTHONPATH=bench/stages \\
        .venv/bin/python bench/peers.py --skip-peers --skip-gateway    # or any bench
    .venv/bin/python bench/stages/report.py /tmp/stages

Every Python process started with that environment (the bench, the broker and the forked consumer,
which inherit it) appends ``<time.monotonic_ns()> <event>`` lines to ``<dir>/<pid>.log`` at these points
(CLOCK_MONOTONIC is one clock for every process of the host):

* ``send``: ``Producer.send`` called; ``acked``: a record's done-callback runs (the publisher);
* ``write_<api>``: a client connection writes a request (``<api>`` is the API key: 0 produce, 1 fetch);
* ``read`` / ``read_done``: a client connection's read callback starts / has handled what it read;
* ``got``: ``Consumer.getmany`` returns records;
* ``broker_read``: a broker connection's read callback; ``start_<api>`` / ``done_<api>``: a request's
  handler starts / has written its answer; ``answered``: an answer was written (a streaming fetch's
  answers come between its start and its done);
* ``gc<generation>_start`` / ``gc<generation>_stop`` in brokers: garbage collections.

Each event costs about 1.5 µs (a ``write`` system call), so compare traced runs with traced runs
only. Development only; nothing in Tideway imports it.
"""

import gc
import os
import sys
import time

_DIR = os.environ.get("TIDEWAY_STAGE_LOG")

if _DIR:
    os.makedirs(_DIR, exist_ok=True)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    _files: dict[int, int] = {}  # pid -> fd: a forked child opens its own file

    def event(name: str) -> None:
        pid = os.getpid()
        fd = _files.get(pid)
        if fd is None:
            fd = _files[pid] = os.open(os.path.join(_DIR, f"{pid}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.write(fd, f"{time.monotonic_ns()} {name}\n".encode())

    from tideway_server.brokers.server import connection as _server_connection

    from tideway.native import conn as _conn
    from tideway.native import consumer as _consumer
    from tideway.native import producer as _producer

    def _wrap_send(send):
        def traced(self, api, body, **kwargs):
            event(f"write_{int(api)}")
            return send(self, api, body, **kwargs)
        return traced

    def _wrap_client_read(read):
        def traced(self, data):
            event("read")
            read(self, data)
            event("read_done")
        return traced

    def _wrap_broker_read(read):
        def traced(self, data):
            event("broker_read")
            read(self, data)
        return traced

    def _wrap_handle(handle):
        async def traced(self, api_key, api_version, correlation_id, body):
            event(f"start_{api_key}")
            try:
                return await handle(self, api_key, api_version, correlation_id, body)
            finally:
                event(f"done_{api_key}")
        return traced

    def _wrap_answer(answer):
        def traced(self, correlation_id, body):
            written = answer(self, correlation_id, body)
            event("answered")
            return written
        return traced

    def _wrap_producer_send(send):
        async def traced(self, *args, **kwargs):
            event("send")
            return await send(self, *args, **kwargs)
        return traced

    def _wrap_done_callback(add_done_callback):
        def traced(self, callback):
            def acked():
                event("acked")
                callback()
            return add_done_callback(self, acked)
        return traced

    def _wrap_getmany(getmany):
        async def traced(self, *args, **kwargs):
            records = await getmany(self, *args, **kwargs)
            if records:
                event("got")
            return records
        return traced

    _conn.Connection.send = _wrap_send(_conn.Connection.send)
    _conn.Connection._data_received = _wrap_client_read(_conn.Connection._data_received)
    _server_connection.BrokerConnection.data_received = _wrap_broker_read(_server_connection.BrokerConnection.data_received)
    _server_connection.BrokerConnection._handle = _wrap_handle(_server_connection.BrokerConnection._handle)
    _server_connection.BrokerConnection.answer = _wrap_answer(_server_connection.BrokerConnection.answer)
    _producer.Producer.send = _wrap_producer_send(_producer.Producer.send)
    _producer.RecordFuture.add_done_callback = _wrap_done_callback(_producer.RecordFuture.add_done_callback)
    _consumer.Consumer.getmany = _wrap_getmany(_consumer.Consumer.getmany)

    if any("broker" == argument for argument in sys.orig_argv):
        gc.callbacks.append(lambda phase, info: event(f"gc{info['generation']}_{phase}"))
