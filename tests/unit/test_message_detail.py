"""The console's message detail pane (issue 43): a JSON value shown as JSON, text as text, hex as hex."""

from __future__ import annotations

import json

from tideway_server.webui.views.messages import detail


def test_a_json_value_is_shown_as_json_with_the_headers_and_time():
    shown = json.loads(detail({"partition": 1, "offset": 7, "timestamp": 1_700_000_000_123, "key": "k",
                               "headers": {"source": "web"}, "value": '{"id": 42, "tags": ["a"]}'}))
    assert shown == {"partition": 1, "offset": 7, "timestamp": "2023-11-14T22:13:20.123+00:00", "key": "k",
                     "headers": {"source": "web"}, "value": {"id": 42, "tags": ["a"]}, "value_as": "json"}


def test_text_stays_text_and_hex_stays_hex():
    assert json.loads(detail({"value": "plain words", "timestamp": 0}))["value_as"] == "text"
    hexed = json.loads(detail({"value": "00ff", "value_hex": True, "timestamp": 0}))
    assert (hexed["value"], hexed["value_as"]) == ("00ff", "hex")
    decoded = json.loads(detail({"value": "00", "value_hex": True, "decoded": '{"id": 1}', "decoded_as": "Avro"}))
    assert decoded["value"] == {"id": 1} and decoded["value_as"] == "json"
