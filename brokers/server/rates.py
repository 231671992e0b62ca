"""A tenant's byte rates on one broker (its plan's publish and consume bytes per second), as token buckets.

Kafka's client quotas are per broker, and so are these: each broker holds a bucket per tenant and direction,
filled at the plan's rate and holding at most one second of it. A request always goes through (a large batch
may leave the bucket in debt); the debt is how long the tenant must wait, which the Kafka listener answers as
``throttle_time_ms`` and enforces by not reading that connection for as long (KIP-219: a client that ignores
the hint is held back anyway).

Memory is bounded: at most ``BUCKETS_MAX`` buckets, the least recently used forgotten first (a forgotten
bucket starts full again, which costs at most one second of the rate).
"""

from __future__ import annotations

import collections
import time

__all__ = ["PUBLISH", "CONSUME", "TenantRates"]

PUBLISH, CONSUME = "publish", "consume"
BUCKETS_MAX = 100_000
THROTTLE_S_MAX = 10.0  # one answer never holds a tenant back longer (as Kafka: about its quota window)


class TenantRates:
    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._buckets: collections.OrderedDict[tuple[int, str], list[float]] = collections.OrderedDict()

    def charge(self, tenant_id: int, direction: str, rate_per_s: int, amount: int) -> float:
        """Take ``amount`` bytes from the tenant's bucket; the seconds it must now wait (0.0 while within its rate).
        A rate of 0 means unlimited."""
        if rate_per_s <= 0 or amount <= 0:
            return 0.0
        now = self._clock()
        key = (tenant_id, direction)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = [float(rate_per_s), now]
            if len(self._buckets) > BUCKETS_MAX:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        tokens, last = bucket
        tokens = min(float(rate_per_s), tokens + (now - last) * rate_per_s) - amount
        bucket[0], bucket[1] = tokens, now
        return 0.0 if tokens >= 0 else min(-tokens / rate_per_s, THROTTLE_S_MAX)
