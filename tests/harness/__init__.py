"""The test harness: what tests and benches start and wait for, apart from pytest's fixtures.

* ``processes``: free ports, the run's cluster secret and operator key, broker, controller and Redis processes,
  deployments of a controller and brokers, the CLI;
* ``control_plane``: a whole deployment (Redis, controller, brokers, Celery workers, ``tideway serve``);
* ``monitoring``: the Celery worker that looks at lag and evaluates alerts;
* ``gateway``, ``console``: helpers of the gateway's and the console's tests;
* ``waiting``: ``wait_until``, the one polling wait.

conftest.py files declare fixtures on top of these; benches import them too.
"""
