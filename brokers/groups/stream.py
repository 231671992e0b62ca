"""A stream consumer group: members, their assignments, committed offsets.

Membership follows Kafka's newer consumer protocol (KIP-848): members send
heartbeats; the coordinator keeps a *target* assignment (``assignor.assign``,
recomputed when members, subscriptions or partition counts change) and moves
each member towards it one heartbeat at a time:

* a partition the member holds but should not is *revoked*: the answer leaves
  it out, and it stays reserved for that member ("revoking") until the member
  reports (``owned``) that it let go, or leaves, or its session expires;
* a partition the member should hold is *given* only once no other member
  holds or is revoking it.

So a partition never has two owners, and nothing stops the world: members
that keep their partitions go on consuming during a rebalance. A member's
epoch rises whenever its assignment changes; a heartbeat with an unknown
epoch is fenced (the member must drop everything and rejoin).

Pure state; the coordinator persists what ``heartbeat`` and friends report as
changed and answers only after that is replicated.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from tideway_server.brokers.groups.assignor import assign

from tideway.protocol import errors

__all__ = ["Member", "StreamGroup"]

TopicPartition = tuple[str, int]
SESSION_TIMEOUT_MS_MIN = 1_000
SESSION_TIMEOUT_MS_MAX = 300_000


@dataclass
class Member:
    member_id: str
    client_id: str = ""
    epoch: int = 0
    previous_epoch: int = -1
    topics: list[str] = field(default_factory=list)
    assigned: set[TopicPartition] = field(default_factory=set)
    revoking: set[TopicPartition] = field(default_factory=set)
    session_timeout_ms: int = 45_000  # Kafka's default since 3.0 (KIP-735)
    last_seen: float = field(default_factory=time.monotonic)

    def to_value(self) -> dict:
        return {
            "client_id": self.client_id,
            "epoch": self.epoch,
            "previous_epoch": self.previous_epoch,
            "topics": self.topics,
            "assigned": sorted(self.assigned),
            "revoking": sorted(self.revoking),
            "session_timeout_ms": self.session_timeout_ms,
        }

    @classmethod
    def from_value(cls, member_id: str, value: dict) -> Member:
        return cls(
            member_id=member_id,
            client_id=value["client_id"],
            epoch=value["epoch"],
            previous_epoch=value["previous_epoch"],
            topics=list(value["topics"]),
            assigned={(t, p) for t, p in value["assigned"]},
            revoking={(t, p) for t, p in value["revoking"]},
            session_timeout_ms=value["session_timeout_ms"],
        )


class StreamGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.epoch = 0
        self.members: dict[str, Member] = {}
        self.target: dict[str, set[TopicPartition]] = {}
        self.offsets: dict[TopicPartition, tuple[int, str, int]] = {}  # offset, metadata, commit time ms
        self._partition_counts: dict[str, int] = {}

    # -- membership -------------------------------------------------------------------

    def heartbeat(
        self,
        *,
        member_id: str,
        member_epoch: int,
        topics: list[str] | None,
        owned: list[TopicPartition] | None,
        session_timeout_ms: int,
        client_id: str,
        partition_counts: dict[str, int],
    ) -> tuple[Member | None, list[Member]]:
        """Handle one heartbeat; return (the member or None if it left, members whose record changed)."""
        changed: list[Member] = []
        if member_epoch == -1:
            member = self.members.pop(member_id, None)
            if member is None:
                raise errors.UnknownMemberIdError(f"member {member_id!r} is not in group {self.group_id!r}")
            self.target.pop(member_id, None)
            self._rebalance(partition_counts)
            return None, [member]
        if member_epoch == 0:
            if not topics:
                raise errors.InvalidRequestError("a joining member must subscribe to at least one topic")
            member_id = member_id or uuid.uuid4().hex
            old = self.members.get(member_id)
            member = Member(member_id=member_id, client_id=client_id, topics=sorted(set(topics)))
            if old is not None:  # rejoining after losing its state: it holds nothing now
                member.epoch = old.epoch
            self.members[member_id] = member
            changed.append(member)
            self._rebalance(partition_counts)
        else:
            member = self.members.get(member_id)
            if member is None:
                raise errors.UnknownMemberIdError(f"member {member_id!r} is not in group {self.group_id!r} (expired or left): rejoin")
            if member_epoch not in (member.epoch, member.previous_epoch):
                raise errors.FencedMemberEpochError(
                    f"member {member_id!r} sent epoch {member_epoch}; the coordinator has {member.epoch}: rejoin"
                )
            if topics is not None and sorted(set(topics)) != member.topics:
                if not topics:
                    raise errors.InvalidRequestError("a member must subscribe to at least one topic")
                member.topics = sorted(set(topics))
                changed.append(member)
                self._rebalance(partition_counts)
            elif partition_counts != self._partition_counts:
                self._rebalance(partition_counts)
        member.session_timeout_ms = max(SESSION_TIMEOUT_MS_MIN, min(session_timeout_ms, SESSION_TIMEOUT_MS_MAX))
        member.last_seen = time.monotonic()
        if owned is not None and member.revoking:
            still = member.revoking & set(owned)
            if still != member.revoking:
                member.revoking = still
                if member not in changed:
                    changed.append(member)
        if self._reconcile(member) and member not in changed:
            changed.append(member)
        return member, changed

    def expire(self, now: float, partition_counts: dict[str, int]) -> list[Member]:
        """Remove members whose session ran out; return them."""
        gone = [m for m in self.members.values() if (now - m.last_seen) * 1000 > m.session_timeout_ms]
        for member in gone:
            del self.members[member.member_id]
            self.target.pop(member.member_id, None)
        if gone:
            self._rebalance(partition_counts)
        return gone

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.topics}

    def _rebalance(self, partition_counts: dict[str, int]) -> None:
        self.epoch += 1
        self._partition_counts = dict(partition_counts)
        self.target = assign(
            {m.member_id: m.topics for m in self.members.values()},
            partition_counts,
            {mid: self.target.get(mid) or self.members[mid].assigned for mid in self.members},
        )

    def _reconcile(self, member: Member) -> bool:
        """Move ``member`` towards its target; True if its assignment changed."""
        desired = self.target.get(member.member_id, set())
        keep = member.assigned & desired
        revoke = member.assigned - desired
        held_elsewhere: set[TopicPartition] = set()
        for other in self.members.values():
            if other is not member:
                held_elsewhere |= other.assigned | other.revoking
        give = {tp for tp in desired - member.assigned if tp not in held_elsewhere and tp not in member.revoking}
        new = keep | give
        if new == member.assigned and not revoke:
            return False
        member.revoking |= revoke
        member.assigned = new
        member.previous_epoch = member.epoch
        member.epoch += 1
        return True

    def owns(self, member_id: str, tp: TopicPartition) -> bool:
        member = self.members.get(member_id)
        return member is not None and (tp in member.assigned or tp in member.revoking)

    def restore_member(self, member: Member) -> None:
        """A member read back from the state log (a new coordinator)."""
        member.last_seen = time.monotonic()  # a full session from now to say hello
        self.members[member.member_id] = member

    def after_restore(self, partition_counts: dict[str, int]) -> None:
        if self.members:
            self.target = {}
            self._rebalance(partition_counts)
