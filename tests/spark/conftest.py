"""One local Spark session (two cores) for the Spark tests; starting one costs a few seconds."""

import pytest


@pytest.fixture(scope="session")
def spark():
    from tideway_server.spark_analytics.session import spark_session

    session = spark_session("local[2]", app="tideway-tests")
    yield session
    session.stop()
