"""Find what stalls a process's event loop: put this directory on PYTHONPATH and set TIDEWAY_STALL_LOG.

    TIDEWAY_STALL_LOG=/tmp/stalls PYTHONPATH=bench/stalls .venv/bin/python bench/gateway.py --phases latency

Every Python process started with that environment (the benchmark, and the brokers, gateway and
workers it starts, which inherit it) writes ``<dir>/<pid>.log``:

* each garbage collection that took longer than 3 ms (generation, duration);
* each time the main thread stayed on the same lines of Python for more than 15 ms (sampled every
  2 ms from a thread of its own), with the stack: a long step of the event loop, such as an import
  on first use or a large synchronous computation;
* modules imported more than 6 s after the process started (an import on the hot path).

Timestamps are ``time.time()``, comparable across processes. The sampling costs CPU: compare
latencies measured with it only with each other. Development only; nothing in Tideway imports it.
"""

import gc
import os
import sys
import threading
import time
import traceback

_DIR = os.environ.get("TIDEWAY_STALL_LOG")
GC_REPORT_S = 0.003
STUCK_REPORT_S = 0.015
SAMPLE_S = 0.002
LATE_IMPORT_S = 6.0
_IDLE = {"run_until_complete", "run_forever", "run", "select", "_run_once"}  # frames of a loop waiting for work

if _DIR:
    os.makedirs(_DIR, exist_ok=True)
    _log = open(os.path.join(_DIR, f"{os.getpid()}.log"), "a", buffering=1)
    _log.write(f"{time.time():.3f} started: {' '.join(sys.orig_argv)[:200]}\n")
    _gc_started = [0.0]

    def _on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            _gc_started[0] = time.perf_counter()
        elif time.perf_counter() - _gc_started[0] > GC_REPORT_S:
            took = (time.perf_counter() - _gc_started[0]) * 1000
            _log.write(f"{time.time():.3f} gc generation {info['generation']}: {took:.1f} ms, {info['collected']} collected\n")

    gc.callbacks.append(_on_gc)
    _main = threading.main_thread().ident

    def _watch() -> None:
        born, modules = time.monotonic(), set(sys.modules)
        last, since, reported, next_import_check = None, 0.0, False, 0.0
        while True:
            time.sleep(SAMPLE_S)
            now = time.perf_counter()
            frame = sys._current_frames().get(_main)
            if frame is not None:
                where, f = [], frame
                while f is not None and len(where) < 4:
                    where.append((f.f_code, f.f_lineno))
                    f = f.f_back
                if frame.f_code.co_name in _IDLE or where != last:
                    if reported:
                        _log.write(f"    ... for {(now - since) * 1000:.1f} ms\n")
                    last, since, reported = (None if frame.f_code.co_name in _IDLE else where), now, False
                elif not reported and now - since > STUCK_REPORT_S:
                    reported = True
                    _log.write(f"{time.time():.3f} main thread on the same lines for over {STUCK_REPORT_S * 1000:.0f} ms:\n"
                               + "".join(traceback.format_stack(frame)[-12:]))
            if now > next_import_check:
                next_import_check = now + 0.3
                current = set(sys.modules)
                if time.monotonic() - born > LATE_IMPORT_S and current - modules:
                    _log.write(f"{time.time():.3f} imported late: {', '.join(sorted(current - modules)[:20])}\n")
                modules = current

    threading.Thread(target=_watch, name="stall-watch", daemon=True).start()
