"""Kafka's classic consumer-group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup): the membership state of
the groups this broker coordinates for Kafka clients. Pure state and futures, no I/O.

The assignment is the client's, as in Kafka: the coordinator collects every member's protocols (the assignors it
supports and their opaque metadata), picks one that every member supports, names a leader and hands it everyone's
metadata; the leader computes the assignment and sends it in its SyncGroup; the coordinator gives each member its
part. Any join, leave or expired session starts a rebalance: members learn of it from their heartbeat
(REBALANCE_IN_PROGRESS) and join again; the rebalance completes once every known member has joined, or after the
longest rebalance timeout, without those that did not.

States (Kafka's): EMPTY -> PREPARING_REBALANCE -> COMPLETING_REBALANCE (awaiting the leader's SyncGroup) -> STABLE.
A generation counts completed rebalances; a request of another generation is ILLEGAL_GENERATION.

The membership lives in memory on the coordinator, like Tideway's own groups' sessions: a coordinator that moves
or restarts loses it, and members join again when they are told NOT_COORDINATOR or UNKNOWN_MEMBER_ID. The
committed offsets are not here: they are the group's offsets in ``__consumer_offsets`` (apis.py commits them
through the broker's group coordinator), replicated like every group's.

Ownership: the broker's event loop.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import struct
import time
import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from tideway.protocol import messages as m
from tideway.protocol.names import split_tenant_prefix

__all__ = ["ClassicGroups", "GroupError", "JoinResult", "State"]

log = logging.getLogger(__name__)

MEMBERS_PER_GROUP_MAX = 1_000
GROUPS_MAX = 100_000  # groups held in memory at once (a tenant's stray group ids cannot grow this without end)
SESSION_TIMEOUT_MS_RANGE = (1_000, 300_000)  # Kafka's group.min/max.session.timeout.ms defaults: 6 s and 30 min
REBALANCE_TIMEOUT_MS_MAX = 300_000


class State(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


class GroupError(Exception):
    """Raised when a group request is refused; ``code`` is Kafka's error code."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


@dataclass
class Member:
    member_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_seen: float = field(default_factory=time.monotonic)
    joining: asyncio.Future | None = None  # answered when the rebalance completes
    syncing: asyncio.Future | None = None  # answered when the leader's assignment arrives


@dataclass(frozen=True)
class JoinResult:
    generation: int
    protocol: str
    leader: str
    member_id: str
    members: list[tuple[str, bytes]]  # the leader's answer: every member and its metadata; empty for the others


@dataclass
class Group:
    group_id: str
    state: State = State.EMPTY
    generation: int = 0
    protocol_type: str = ""
    protocol: str = ""
    leader: str = ""
    members: dict[str, Member] = field(default_factory=dict)
    rebalance_deadline: asyncio.TimerHandle | None = None


class ClassicGroups:
    """Every classic group this broker coordinates, by its broker-side id (a tenant's id carries its prefix)."""

    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}

    # -- requests ---------------------------------------------------------------------------

    async def join(self, group_id: str, member_id: str, client_id: str, protocol_type: str,
                   protocols: list[tuple[str, bytes]], session_timeout_ms: int, rebalance_timeout_ms: int) -> JoinResult:
        if not SESSION_TIMEOUT_MS_RANGE[0] <= session_timeout_ms <= SESSION_TIMEOUT_MS_RANGE[1]:
            raise GroupError(ErrorCode.invalid_session_timeout,
                             f"session timeout {session_timeout_ms} ms outside {SESSION_TIMEOUT_MS_RANGE} ms")
        if not protocols:
            raise GroupError(ErrorCode.inconsistent_group_protocol, "a member supports no assignor")
        group = self.groups.get(group_id)
        if group is None:
            if len(self.groups) >= GROUPS_MAX:
                raise GroupError(ErrorCode.coordinator_not_available, "this coordinator holds too many groups")
            group = self.groups[group_id] = Group(group_id)
        if group.members and protocol_type != group.protocol_type:
            raise GroupError(ErrorCode.inconsistent_group_protocol, f"the group's members use {group.protocol_type!r}")
        if group.members and not self._common_protocols(group, protocols):
            raise GroupError(ErrorCode.inconsistent_group_protocol, "no assignor in common with the group's members")
        member = group.members.get(member_id) if member_id else None
        if member_id and member is None:
            raise GroupError(ErrorCode.unknown_member_id, f"member {member_id!r} is not in the group: join without an id")
        if member is None:
            if len(group.members) >= MEMBERS_PER_GROUP_MAX:
                raise GroupError(ErrorCode.group_max_size_reached, f"at most {MEMBERS_PER_GROUP_MAX} members")
            member = Member(member_id=f"{client_id or 'member'}-{uuid.uuid4()}",
                            session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=0, protocols=protocols)
            group.members[member.member_id] = member
        member.protocols, member.session_timeout_ms = protocols, session_timeout_ms
        member.rebalance_timeout_ms = min(max(rebalance_timeout_ms, session_timeout_ms), REBALANCE_TIMEOUT_MS_MAX)
        member.last_seen = time.monotonic()
        group.protocol_type = protocol_type
        if member.joining is not None and not member.joining.done():
            member.joining.cancel()  # a second join of the same member replaces the first
        member.joining = asyncio.get_running_loop().create_future()
        self._prepare_rebalance(group)
        self._complete_join_if_ready(group)
        return await member.joining

    async def sync(self, group_id: str, member_id: str, generation: int, assignments: dict[str, bytes]) -> bytes:
        group, member = self._member(group_id, member_id)
        if generation != group.generation:
            raise GroupError(ErrorCode.illegal_generation, f"generation {generation} is not the group's {group.generation}")
        member.last_seen = time.monotonic()
        if group.state is State.PREPARING_REBALANCE:
            raise GroupError(ErrorCode.rebalance_in_progress, "the group is rebalancing: join again")
        if group.state is State.STABLE:
            return member.assignment
        if member_id == group.leader:
            for mid, other in group.members.items():
                other.assignment = assignments.get(mid, b"")
            group.state = State.STABLE
            for other in group.members.values():
                if other.syncing is not None and not other.syncing.done():
                    other.syncing.set_result(other.assignment)
                other.syncing = None
            return member.assignment
        member.syncing = asyncio.get_running_loop().create_future()
        return await member.syncing

    def heartbeat(self, group_id: str, member_id: str, generation: int) -> None:
        group, member = self._member(group_id, member_id)
        member.last_seen = time.monotonic()
        if generation != group.generation:
            raise GroupError(ErrorCode.illegal_generation, f"generation {generation} is not the group's {group.generation}")
        if group.state is State.PREPARING_REBALANCE:
            raise GroupError(ErrorCode.rebalance_in_progress, "the group is rebalancing: join again")

    def leave(self, group_id: str, member_id: str) -> None:
        group, member = self._member(group_id, member_id)
        self._remove(group, member, "left the group")

    def check_commit(self, group_id: str, member_id: str, generation: int) -> None:
        """A commit of ``member_id`` in ``generation`` may go ahead (generation -1 without a member: a consumer
        outside the group's membership, allowed only while the group has no members)."""
        group = self.groups.get(group_id)
        if generation < 0 and not member_id:
            if group is not None and group.members:
                raise GroupError(ErrorCode.illegal_generation, "the group has members: only they may commit")
            return
        if group is None or member_id not in group.members:
            raise GroupError(ErrorCode.unknown_member_id, f"member {member_id!r} is not in the group")
        if generation != group.generation:
            raise GroupError(ErrorCode.illegal_generation, f"generation {generation} is not the group's {group.generation}")
        if group.state is State.COMPLETING_REBALANCE:
            raise GroupError(ErrorCode.rebalance_in_progress, "the group is completing a rebalance")
        group.members[member_id].last_seen = time.monotonic()

    def expire_sessions(self) -> None:
        """Remove members not heard from within their session timeout (a member waiting in a join counts as heard)."""
        now = time.monotonic()
        for group in list(self.groups.values()):
            for member in list(group.members.values()):
                waiting = member.joining is not None and not member.joining.done()
                if not waiting and now - member.last_seen > member.session_timeout_ms / 1000:
                    self._remove(group, member, "session expired")
            if not group.members and group.state is State.EMPTY:
                del self.groups[group.group_id]

    def forget_if_empty(self, group_id: str) -> None:
        """The group was deleted (DeleteGroups): its membership record goes too, unless someone joined meanwhile."""
        group = self.groups.get(group_id)
        if group is not None and not group.members:
            if group.rebalance_deadline is not None:
                group.rebalance_deadline.cancel()
            del self.groups[group_id]

    def member_descriptions(self, group_id: str) -> list[m.MemberDescription]:
        """The group's Kafka members as Tideway describes members (the coordinator's DESCRIBE_GROUP and its checks
        before a reset or an offset delete see them): the topics each subscribes to and the partitions it was
        assigned, read from the consumer protocol's subscription and assignment when the group uses it."""
        group = self.groups.get(group_id)
        if group is None:
            return []
        # A tenant's members name its topics by its own names (the bytes are the client's): broker-side names here.
        prefix = split_tenant_prefix(group_id)[0]
        out = []
        for member in group.members.values():
            topics: list[str] = []
            assigned: list[m.TopicPartitionRef] = []
            if group.protocol_type == "consumer":
                metadata = dict(member.protocols).get(group.protocol) or (member.protocols[0][1] if member.protocols else b"")
                topics = [prefix + topic for topic in _subscribed_topics(metadata)]
                assigned = [m.TopicPartitionRef(topic=prefix + t, partition=p)
                            for t, p in _assigned_partitions(member.assignment)]
            out.append(m.MemberDescription(member_id=member.member_id, client_id="", member_epoch=group.generation,
                                           topics=topics, assigned=assigned, revoking=[]))
        return out

    # -- rebalances ----------------------------------------------------------------------------

    def _member(self, group_id: str, member_id: str) -> tuple[Group, Member]:
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if member is None:
            raise GroupError(ErrorCode.unknown_member_id, f"member {member_id!r} is not in the group: join again")
        return group, member

    @staticmethod
    def _common_protocols(group: Group, protocols: list[tuple[str, bytes]]) -> list[str]:
        names = [name for name, _ in protocols]
        return [n for n in names if all(n in {p for p, _ in m.protocols} for m in group.members.values())]

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state is State.PREPARING_REBALANCE:
            return
        for member in group.members.values():  # a rebalance cancels a sync in progress: members join again
            if member.syncing is not None and not member.syncing.done():
                member.syncing.set_exception(GroupError(ErrorCode.rebalance_in_progress, "the group is rebalancing"))
            member.syncing = None
        group.state = State.PREPARING_REBALANCE
        timeout_s = max(m.rebalance_timeout_ms for m in group.members.values()) / 1000
        group.rebalance_deadline = asyncio.get_running_loop().call_later(timeout_s, self._rebalance_timed_out, group)

    def _rebalance_timed_out(self, group: Group) -> None:
        group.rebalance_deadline = None
        if group.state is not State.PREPARING_REBALANCE:
            return
        for member in list(group.members.values()):
            if member.joining is None or member.joining.done():
                self._remove(group, member, "did not join the rebalance in time", rebalance=False)
        self._complete_join_if_ready(group)

    def _complete_join_if_ready(self, group: Group) -> None:
        if group.state is not State.PREPARING_REBALANCE:
            return
        if any(m.joining is None or m.joining.done() for m in group.members.values()):
            return  # someone has not joined again yet
        if group.rebalance_deadline is not None:
            group.rebalance_deadline.cancel()
            group.rebalance_deadline = None
        if not group.members:
            group.state = State.EMPTY
            return
        group.generation += 1
        first = next(iter(group.members.values()))
        group.protocol = next(name for name, _ in first.protocols
                              if all(name in {p for p, _ in m.protocols} for m in group.members.values()))
        if group.leader not in group.members:
            group.leader = first.member_id
        group.state = State.COMPLETING_REBALANCE
        log.info("Kafka group %s: generation %d, %d member(s), assignor %s, leader %s", group.group_id,
                 group.generation, len(group.members), group.protocol, group.leader)
        everyone = [(m.member_id, dict(m.protocols)[group.protocol]) for m in group.members.values()]
        for member in group.members.values():
            member.joining.set_result(JoinResult(group.generation, group.protocol, group.leader, member.member_id,
                                                 everyone if member.member_id == group.leader else []))

    def _remove(self, group: Group, member: Member, why: str, *, rebalance: bool = True) -> None:
        del group.members[member.member_id]
        log.info("Kafka group %s: member %s %s", group.group_id, member.member_id, why)
        for future in (member.joining, member.syncing):
            if future is not None and not future.done():
                future.set_exception(GroupError(ErrorCode.unknown_member_id, f"member {member.member_id}: {why}"))
        if group.leader == member.member_id:
            group.leader = ""
        if not rebalance:
            return
        if group.members:
            self._prepare_rebalance(group)
            self._complete_join_if_ready(group)
        else:
            if group.rebalance_deadline is not None:
                group.rebalance_deadline.cancel()
                group.rebalance_deadline = None
            group.state = State.EMPTY
            group.generation += 1  # a commit of the last generation is refused now (it has no member)


# -- the consumer protocol's subscription and assignment (Kafka's ConsumerProtocolSubscription and
# ConsumerProtocolAssignment: a version, then topics as int16-length strings; an assignment gives each topic's
# partitions as int32s). What follows the topics (user data, owned partitions, ...) is not needed here.

_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


def _string(data: bytes, at: int) -> tuple[str, int]:
    (size,) = _I16.unpack_from(data, at)
    at += 2
    if size < 0 or at + size > len(data):
        raise ValueError("a string runs past the end")
    return data[at:at + size].decode(), at + size


def _subscribed_topics(metadata: bytes) -> list[str]:
    try:
        (count,) = _I32.unpack_from(metadata, 2)
        at, topics = 6, []
        for _ in range(max(count, 0)):
            topic, at = _string(metadata, at)
            topics.append(topic)
        return topics
    except (struct.error, ValueError, UnicodeDecodeError):
        return []  # not the consumer protocol's bytes: nothing known


def _assigned_partitions(assignment: bytes) -> list[tuple[str, int]]:
    try:
        (count,) = _I32.unpack_from(assignment, 2)
        at, out = 6, []
        for _ in range(max(count, 0)):
            topic, at = _string(assignment, at)
            (partitions,) = _I32.unpack_from(assignment, at)
            at += 4
            for _ in range(max(partitions, 0)):
                out.append((topic, _I32.unpack_from(assignment, at)[0]))
                at += 4
        return out
    except (struct.error, ValueError, UnicodeDecodeError):
        return []
