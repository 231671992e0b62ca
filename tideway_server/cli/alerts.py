"""``tideway lag`` and ``tideway alerts``: a group's lag, alert rules and notification channels, over the REST API."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime, timedelta

from tideway_server.cli.api import api_options, call

METRICS = ("lag", "lag_seconds", "oldest_unacked_seconds", "dead_letters", "publish_rate", "consume_rate", "quota_use")


def add_commands(subparsers) -> None:
    lag = subparsers.add_parser(
        "lag", help="a consumer group's lag: now, its status and time-to-drain, and its history",
        description="GET /api/v1/queues/QUEUE/groups/GROUP/lag: the latest look (every few seconds), the status and "
        "time-to-drain from the consumer_lag job, and the lag per minute (hour, day) over a range.")
    api_options(lag)
    lag.add_argument("queue")
    lag.add_argument("group")
    lag.add_argument("--kind", choices=["stream", "queue"], default="stream", help="the group's kind (default: stream)")
    lag.add_argument("--step", choices=["minute", "hour", "day"], default="minute")
    lag.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    lag.set_defaults(handler=_lag)

    alerts = subparsers.add_parser(
        "alerts", help="alert rules and notification channels",
        description="Alert rules on lag (messages or seconds), unacknowledged age, dead letters, rates or quota use, "
        "notified to signed webhooks or e-mail. Examples:\n"
        "  tideway alerts channel-add ops --webhook https://example.com/hooks/tideway   (prints the signing secret once)\n"
        "  tideway alerts create behind --metric lag_seconds --queue orders --group billing --above 60 --recover 10 "
        "--pending 3/5 --channel ops\n"
        "  tideway alerts list; tideway alerts history 4; tideway alerts silence 4 --minutes 30",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = alerts.add_subparsers(dest="action", required=True)

    def command(name: str, help_: str, handler):
        parser = actions.add_parser(name, help=help_)
        api_options(parser)
        parser.add_argument("--json", action="store_true", help="print the API's answer as JSON")
        parser.set_defaults(handler=handler)
        return parser

    command("list", "every rule with its state", _list)
    create = command("create", "create a rule", _create)
    create.add_argument("name")
    create.add_argument("--metric", choices=METRICS, required=True)
    create.add_argument("--queue", default="", help="one queue (default: every queue)")
    create.add_argument("--group", default="", help="one group (default: every group)")
    which = create.add_mutually_exclusive_group(required=True)
    which.add_argument("--above", type=float, help="fire when the value is above this")
    which.add_argument("--below", type=float, help="fire when the value is below this")
    create.add_argument("--recover", type=float, default=None, help="back to OK only past this (default: the threshold)")
    create.add_argument("--pending", default="1/1", help="M/N: breaching in M of the last N evaluations (default 1/1)")
    create.add_argument("--missing", default="insufficient_data",
                        choices=["breaching", "not_breaching", "keep_last", "insufficient_data"], help="when there is no data")
    create.add_argument("--repeat", type=int, default=0, help="remind every this many seconds while firing (0: never)")
    create.add_argument("--channel", action="append", default=[], help="a channel to notify (repeat for more)")
    history = command("history", "a rule's transitions and their deliveries", _history)
    history.add_argument("rule", type=int)
    silence = command("silence", "silence a rule for a while (or --off)", _silence)
    silence.add_argument("rule", type=int)
    silence.add_argument("--minutes", type=int, default=60)
    silence.add_argument("--off", action="store_true", help="end the silence")
    delete = command("delete", "delete a rule", _delete)
    delete.add_argument("rule", type=int)
    command("channels", "every notification channel", _channels)
    add = command("channel-add", "add a webhook (signed) or e-mail channel", _channel_add)
    add.add_argument("name")
    target = add.add_mutually_exclusive_group(required=True)
    target.add_argument("--webhook", help="the URL to POST to")
    target.add_argument("--email", help="the address to write to")
    test = command("channel-test", "send a test notification now", _channel_test)
    test.add_argument("channel", type=int)


def _print(args, body) -> bool:
    if args.json:
        print(json.dumps(body, indent=2))
    return args.json


def _lag(args) -> int:
    body = call(args, "GET", f"/api/v1/queues/{args.queue}/groups/{args.group}/lag",
                params={"kind": args.kind, "step": args.step}).json()
    if _print(args, body):
        return 0
    live, status = body["live"], body["status"]
    if live:
        print(f"now: {live['lag']} messages behind, {live['lag_ms'] / 1000:.1f} s; in {live['produce_rate']}/s, "
              f"out {live['consume_rate']}/s")
    if status:
        drain = "falling behind" if status["falling_behind"] else (
            f"drains in {status['drain_seconds']:.0f} s" if status["drain_seconds"] is not None else "nothing to drain")
        print(f"status: {status['status']} ({drain}) over {status['window_start']} .. {status['window_end']}")
    for point in body["series"]:
        print(f"{point['start']}  max {point['lag_max']:>10}  p95 {point['lag_p95']:>12}  "
              f"max {point['lag_seconds_max']:>9.1f} s  p95 {point['lag_seconds_p95']:>9.1f} s")
    return 0


def _list(args) -> int:
    rows = call(args, "GET", "/api/v1/alerts/").json()
    if _print(args, rows):
        return 0
    for r in rows:
        scope = (r["queue"] or "*") + (f"/{r['group']}" if r["group"] else "")
        print(f"{r['id']:>5}  {r['name']:<24} {r['state']:<17} {r['metric']} {r['comparator']} {r['threshold']:g} on {scope}"
              f"  (value {r['value']}){'  silenced' if r['silenced_until'] else ''}")
    if not rows:
        print("no alert rule yet")
    return 0


def _create(args) -> int:
    try:
        m, n = (int(x) for x in args.pending.split("/"))
    except ValueError:
        raise SystemExit("tideway: --pending is M/N, such as 3/5") from None
    threshold = args.above if args.above is not None else args.below
    body = {"name": args.name, "metric": args.metric, "queue": args.queue, "group": args.group,
            "comparator": ">" if args.above is not None else "<", "threshold": threshold,
            "recovery_threshold": threshold if args.recover is None else args.recover, "pending": {"m": m, "n": n},
            "missing_data": args.missing, "repeat_interval_s": args.repeat, "channels": args.channel}
    rule = call(args, "POST", "/api/v1/alerts/", body=body).json()
    if not _print(args, rule):
        print(f"rule {rule['id']} ({rule['name']}) created")
    return 0


def _history(args) -> int:
    body = call(args, "GET", f"/api/v1/alerts/{args.rule}/history").json()
    if _print(args, body):
        return 0
    for e in body["events"]:
        sent = ", ".join(f"{d['channel']}: {d['status']} ({len(d['attempts'])} attempts)" for d in e["deliveries"]) or "-"
        print(f"{e['at']}  #{e['sequence']} {e['kind']:<9} {e['from']} -> {e['to']}  value {e['value']}  {sent}")
    return 0


def _silence(args) -> int:
    until = None if args.off else (datetime.now(UTC) + timedelta(minutes=args.minutes)).isoformat()
    rule = call(args, "PATCH", f"/api/v1/alerts/{args.rule}", body={"silenced_until": until}).json()
    if not _print(args, rule):
        print(f"rule {rule['id']} silenced until {rule['silenced_until']}" if until else f"rule {rule['id']}: silence ended")
    return 0


def _delete(args) -> int:
    call(args, "DELETE", f"/api/v1/alerts/{args.rule}")
    print(f"rule {args.rule} deleted")
    return 0


def _channels(args) -> int:
    rows = call(args, "GET", "/api/v1/notification-channels/").json()
    if _print(args, rows):
        return 0
    for c in rows:
        print(f"{c['id']:>5}  {c['name']:<20} {c['kind']:<8} {c['url'] or c['email']}")
    if not rows:
        print("no channel yet")
    return 0


def _channel_add(args) -> int:
    body = {"name": args.name, "kind": "webhook" if args.webhook else "email"}
    body["url" if args.webhook else "email"] = args.webhook or args.email
    channel = call(args, "POST", "/api/v1/notification-channels/", body=body).json()
    if _print(args, channel):
        return 0
    print(f"channel {channel['id']} ({channel['name']}) added")
    if channel.get("secret"):
        print(f"signing secret (shown once, keep it): {channel['secret']}")
    return 0


def _channel_test(args) -> int:
    delivery = call(args, "POST", f"/api/v1/notification-channels/{args.channel}/test").json()
    if _print(args, delivery):
        return 0
    last = delivery["attempts"][-1] if delivery["attempts"] else {}
    print(f"test notification: {delivery['status']}" + (f" (HTTP {last['status_code']})" if last.get("status_code") else "")
          + (f": {last['error']}" if last.get("error") else ""))
    return 0 if delivery["status"] == "delivered" else 1
