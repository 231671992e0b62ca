"""The broker's command line: what it takes, and what it refuses with a clear message."""

import pytest

from tideway_server.cli.main import build_parser


def broker_args(*extra: str):
    return build_parser().parse_args(["broker", "--data", "/tmp/unused", *extra])


def test_the_scrubber_pass_interval_defaults_to_an_hour_and_takes_seconds():
    assert broker_args().scrub_pass_interval == 3600
    assert broker_args("--scrub-pass-interval", "0").scrub_pass_interval == 0
    assert broker_args("--scrub-pass-interval", "90.5").scrub_pass_interval == 90.5


@pytest.mark.parametrize("value", ["-1", "nan", "soon"])
def test_a_scrubber_pass_interval_below_zero_or_not_a_number_is_refused(value, capsys):
    with pytest.raises(SystemExit):
        broker_args("--scrub-pass-interval", value)
    assert "is not a number of seconds of at least 0" in capsys.readouterr().err
