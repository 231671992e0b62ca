"""Per-tenant rate limits (Redis token buckets) and the deduplication window.

Buckets: requests/s, publish bytes/s and consume bytes/s of the tenant's plan,
each holding at most one second of its rate. A call passes while a bucket is
above zero and then takes its cost, which may leave the bucket in debt (a
single publish may be larger than one second of quota); callers wait until
the debt is paid back. Consumed bytes are charged after delivery. Every
gateway process shares the buckets, so the limit is per tenant, not per
process.

Deduplication ids are remembered for five minutes per queue: the first publish
with an id reserves it (SET NX, for PENDING_S) before producing, and records
where the message went (for five minutes) once the brokers acknowledged it. A
retry while the first publish is still in flight gets 409
``publish_in_progress`` with Retry-After; a retry after the brokers refused it
publishes it.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio as redis
from django.conf import settings
from tideway_server.gateway.auth import Caller
from tideway_server.gateway.errors import GatewayError

log = logging.getLogger(__name__)

DEDUP_WINDOW_S = 300
# While a publish is in flight its ids are reserved for at most this long: longer than the
# gateway's producer may still deliver them (pool.DELIVERY_TIMEOUT_MS), so a gateway that
# dies mid-publish blocks a retry for no longer than this.
PENDING_S = 30
_PENDING = "pending"

# KEYS: bucket keys. ARGV: rate (per s) and cost for each key.
# Returns {0, 0} when every bucket is above zero (and takes the costs), else {ms to wait, which key}.
# Time is Redis's own (TIME), so every gateway process and host fills the buckets by one clock, and time that
# seems to run backwards (a clock stepped back) adds nothing rather than taking tokens away.
_TAKE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local wait = 0
local which = 0
local levels = {}
for i, key in ipairs(KEYS) do
  local rate = tonumber(ARGV[2 * i - 1])
  local state = redis.call('HMGET', key, 't', 'ts')
  local tokens = tonumber(state[1]) or rate
  local ts = tonumber(state[2]) or now
  tokens = math.min(rate, tokens + math.max(0, now - ts) * rate / 1000)
  levels[i] = tokens
  if tokens <= 0 then
    local w = math.ceil((1 - tokens) * 1000 / rate)
    if w > wait then wait = w; which = i end
  end
end
if wait > 0 then return {wait, which} end
for i, key in ipairs(KEYS) do
  redis.call('HSET', key, 't', levels[i] - tonumber(ARGV[2 * i]), 'ts', now)
  redis.call('PEXPIRE', key, 60000)
end
return {0, 0}
"""

# What was throttled, counted per tenant and limit, by minute (kept 2 h) and by hour (kept 25 h): the console
# and the ``throttled`` alert metric read them (``throttled_counts``).
LIMITS = {"req": "requests", "in": "publish_bytes", "out": "consume_bytes"}
_LIMIT_NAMES = frozenset(LIMITS.values())
_MINUTE_KEPT_S, _HOUR_KEPT_S = 2 * 3600, 25 * 3600


def _throttle_keys(tenant_id: int, now_s: int) -> tuple[str, str]:
    return f"tw:thr:{tenant_id}:m:{now_s // 60}", f"tw:thr:{tenant_id}:h:{now_s // 3600}"

_connections: dict[int, redis.Redis] = {}
_scripts: dict[int, object] = {}


def connection() -> redis.Redis:
    """The Redis connection pool of this event loop."""
    loop_id = id(asyncio.get_running_loop())
    found = _connections.get(loop_id)
    if found is None:
        found = _connections[loop_id] = redis.from_url(settings.TIDEWAY_REDIS_URL, socket_timeout=5, socket_connect_timeout=2)
        _scripts[loop_id] = found.register_script(_TAKE)
    return found


_last_warning = 0.0


def _redis_down(exc: Exception) -> None:
    global _last_warning
    if time.monotonic() - _last_warning > 10:
        _last_warning = time.monotonic()
        log.warning("Redis at %s is unreachable (%s): rate limits are not enforced until it is back", settings.TIDEWAY_REDIS_URL, exc)


# Each process takes a lease of 1/20 of a second of a bucket's rate at a time and spends it
# locally, so most calls need no Redis round trip; a process can admit at most one lease
# more than the bucket held, and unused leases lapse after a second.
LEASE_FRACTION = 0.05
LEASE_SECONDS = 1.0
_leases: dict[str, list[float]] = {}  # bucket key -> [tokens left, expiry (monotonic)]


async def take(caller: Caller, *, requests: int = 1, publish_bytes: int = 0, consume_bytes: int = 0,
               consuming: bool = False) -> None:
    """Take from the tenant's buckets or raise 429 ``throttled`` (with how long to wait).

    ``consuming``: the call delivers messages, so the consume bucket must not be in debt
    (its cost, ``consume_bytes``, is what earlier deliveries owe).
    """
    limits, tenant = caller.limits, caller.tenant_id
    now = time.monotonic()
    keys, args, leased, names = [], [], [], []
    for name, rate, cost, applies in (("req", limits.requests_per_s, requests, requests > 0),
                                      ("in", limits.publish_bytes_per_s, publish_bytes, publish_bytes > 0),
                                      ("out", limits.consume_bytes_per_s, consume_bytes, consuming or consume_bytes > 0)):
        if not applies:
            continue
        key = f"tw:rl:{tenant}:{name}"
        lease = _leases.get(key)
        if lease is not None and lease[1] > now and lease[0] > 0 and lease[0] >= cost:
            lease[0] -= cost
            continue
        chunk = max(rate * LEASE_FRACTION, 1)
        keys.append(key)
        names.append(name)
        args += [max(rate, 1), cost + chunk]
        leased.append((key, chunk))
    if not keys:
        return
    connection()
    script = _scripts[id(asyncio.get_running_loop())]
    try:
        wait_ms, which = (int(x) for x in await script(keys=keys, args=args))
    except (redis.RedisError, OSError) as exc:
        _redis_down(exc)  # availability first: a Redis outage must not stop publishing
        return
    if wait_ms > 0:
        limit = LIMITS[names[which - 1]]
        await _count_throttled(tenant, limit)
        raise GatewayError("throttled", f"the plan's rate limit was reached ({limit.replace('_', ' ')}/s): retry in "
                           f"{wait_ms} ms", details={"retry_after_ms": wait_ms, "limit": limit},
                           retry_after_ms=wait_ms)
    if len(_leases) > 100_000:
        _leases.clear()
    for key, chunk in leased:
        _leases[key] = [chunk, now + LEASE_SECONDS]


async def _count_throttled(tenant_id: int, limit: str) -> None:
    minute, hour = _throttle_keys(tenant_id, int(time.time()))
    try:
        async with connection().pipeline(transaction=False) as pipe:
            pipe.hincrby(minute, limit, 1)
            pipe.expire(minute, _MINUTE_KEPT_S)
            pipe.hincrby(hour, limit, 1)
            pipe.expire(hour, _HOUR_KEPT_S)
            await pipe.execute()
    except (redis.RedisError, OSError) as exc:
        _redis_down(exc)


def throttled_counts(client, tenant_ids: list[int], *, minutes: int = 60) -> dict[int, dict[str, dict[str, int]]]:
    """Per tenant: {"last_minute" | "last_hour" | "last_day": {limit: times throttled}} (a synchronous Redis client).

    "last_minute" is the current and the previous minute (a look never finds an empty minute just begun),
    "last_hour" the last ``minutes`` minutes, "last_day" the last 24 hours and this one. One round trip.
    """
    now_s = int(time.time())
    pipe = client.pipeline(transaction=False)
    for tenant_id in tenant_ids:
        for back in range(minutes):
            pipe.hgetall(_throttle_keys(tenant_id, now_s - back * 60)[0])
        for back in range(25):
            pipe.hgetall(_throttle_keys(tenant_id, now_s - back * 3600)[1])
    answers = iter(pipe.execute())
    out = {}
    for tenant_id in tenant_ids:
        spans = {"last_minute": dict.fromkeys(LIMITS.values(), 0), "last_hour": dict.fromkeys(LIMITS.values(), 0),
                 "last_day": dict.fromkeys(LIMITS.values(), 0)}
        for back in range(minutes):
            for limit, count in _counted(next(answers)):
                spans["last_hour"][limit] += count
                if back < 2:
                    spans["last_minute"][limit] += count
        for _back in range(25):
            for limit, count in _counted(next(answers)):
                spans["last_day"][limit] += count
        out[tenant_id] = spans
    return out


def _counted(fields: dict) -> list[tuple[str, int]]:
    """A counts hash as Redis answers it (bytes, perhaps fields of another version): (limit, count) of known limits."""
    out = []
    for limit, count in fields.items():
        limit = limit.decode() if isinstance(limit, bytes) else limit
        if limit in _LIMIT_NAMES:
            out.append((limit, int(count)))
    return out


async def charge_consumed(caller: Caller, consumed_bytes: int) -> None:
    """Charge bytes already delivered to the consume bucket (the next receive waits if it is in debt)."""
    if consumed_bytes <= 0:
        return
    key = f"tw:rl:{caller.tenant_id}:out"
    try:
        # A bucket already in debt stays so: charge unconditionally (the refill is computed from its time stamp).
        async with connection().pipeline(transaction=False) as pipe:
            # A bucket not there yet (expired, or never taken from: the console reads without a REST call) starts
            # full, as _TAKE would make it; without its time stamp it would never refill.
            pipe.hsetnx(key, "t", max(caller.limits.consume_bytes_per_s, 1))
            pipe.hsetnx(key, "ts", int(time.time() * 1000))
            pipe.hincrbyfloat(key, "t", -consumed_bytes)
            pipe.pexpire(key, 60_000)
            await pipe.execute()
    except (redis.RedisError, OSError) as exc:
        _redis_down(exc)


# -- deduplication ----------------------------------------------------------------------------


def _dedup_key(queue_id: int, dedup_id: str) -> str:
    return f"tw:dd:{queue_id}:{dedup_id}"


async def reserve_dedup_ids(queue_id: int, dedup_ids: list[tuple[int, str]]) -> None:
    """Reserve (message index, dedup id) pairs for five minutes, or refuse them all with 409 ``duplicate_message``."""
    if not dedup_ids:
        return
    seen: dict[str, int] = {}
    repeats = []
    for index, dedup_id in dedup_ids:
        if dedup_id in seen:
            repeats.append({"index": index, "dedup_id": dedup_id, "same_as_index": seen[dedup_id]})
        seen[dedup_id] = index
    if repeats:
        raise GatewayError("duplicate_message", "the request carries the same dedup id twice", details={"duplicates": repeats})
    db = connection()
    try:
        async with db.pipeline(transaction=False) as pipe:
            for _index, dedup_id in dedup_ids:
                pipe.set(_dedup_key(queue_id, dedup_id), _PENDING, nx=True, ex=PENDING_S)
            reserved = await pipe.execute()
        if all(reserved):
            return
        taken = [(index, dedup_id) for (index, dedup_id), ok in zip(dedup_ids, reserved, strict=True) if not ok]
        mine = [dedup_id for (_index, dedup_id), ok in zip(dedup_ids, reserved, strict=True) if ok]
        previous = await db.mget([_dedup_key(queue_id, d) for _i, d in taken])
        if mine:
            await db.delete(*(_dedup_key(queue_id, d) for d in mine))
    except (redis.RedisError, OSError) as exc:
        raise GatewayError("unavailable", f"deduplication is unavailable (Redis: {exc}); retry", retry_after_ms=1000) from None
    duplicates, in_flight = [], []
    for (index, dedup_id), where in zip(taken, previous, strict=True):
        entry = {"index": index, "dedup_id": dedup_id}
        where = (where or b"").decode()
        if where and where != _PENDING:
            partition, offset = where.split(":")
            duplicates.append({**entry, "partition": int(partition), "offset": int(offset)})
        else:
            in_flight.append(entry)
    if in_flight:
        raise GatewayError("publish_in_progress", f"{len(in_flight)} message(s) carry a dedup id whose publish is still "
                           f"in flight; nothing was published: retry in a few seconds (at most {PENDING_S})",
                           details={"in_flight": in_flight, "duplicates": duplicates}, retry_after_ms=2000)
    raise GatewayError("duplicate_message", f"{len(duplicates)} message(s) repeat a dedup id published in the last "
                       f"{DEDUP_WINDOW_S // 60} minutes; nothing was published", details={"duplicates": duplicates})


async def settle_dedup_ids(queue_id: int, outcomes: list[tuple[str, tuple[int, int] | None]]) -> None:
    """After producing: remember where each message went, or free the ids of those that failed."""
    if not outcomes:
        return
    try:
        async with connection().pipeline(transaction=False) as pipe:
            for dedup_id, where in outcomes:
                key = _dedup_key(queue_id, dedup_id)
                if where is None:
                    pipe.delete(key)
                else:
                    pipe.set(key, f"{where[0]}:{where[1]}", xx=True, ex=DEDUP_WINDOW_S)
            await pipe.execute()
    except (redis.RedisError, OSError) as exc:
        log.warning("could not record dedup ids of queue %d: %s", queue_id, exc)
