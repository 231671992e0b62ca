"""Authorization of every request, in one place (the router calls ``Authorizer.authorize``).

Every API has an access class (``ACCESS``); an API missing from the table is
refused (a new API must be classified before anyone can call it):

* ``ANYONE``: API_VERSIONS and the SASL requests, before authentication;
* ``INTERNAL``: replication and controller RPCs, for cluster peers on an
  internal listener only (a FETCH by a follower or a queue coordinator,
  ``replica_id`` other than -1 or -3, counts as one; -3, a service's
  unmetered look, is for services and peers);
* ``OPERATOR``: ALTER_CONFIGS and DESCRIBE_CLUSTER: peers and service
  principals;
* ``TENANT``: data, group and topic-admin APIs: peers and services as they are;
  tenants through a *view* that checks the key's scopes and queue patterns
  (``brokers.security.acl``), gives their names the tenant's broker-side prefix
  on the way in (``tideway.protocol.names``) and takes it off on the way out,
  so a tenant can neither name nor see anything that is not its own. A
  tenant's CREATE_TOPICS, DELETE_TOPICS and CREATE_PARTITIONS (the manage
  scope) are marked with its tenant id, and the controller hands them to the
  control plane's queue actions: the plan's quotas apply as through REST.

A request naming anything the key may not touch is refused whole, with
TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED or AUTHORIZATION_FAILED,
before any handler runs: nothing changes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from tideway_server.brokers.security.acl import CONSUME, MANAGE, PRODUCE
from tideway_server.brokers.security.principal import Kind, Principal
from tideway_server.brokers.server.connection import Listener, Session
from tideway_server.brokers.server.credentials import CredentialStore

from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey
from tideway.protocol.names import GROUP_KINDS, split_tenant_prefix

__all__ = ["ACCESS", "Access", "Authorizer"]


class Access(enum.Enum):
    ANYONE = "anyone"
    INTERNAL = "internal"
    OPERATOR = "operator"
    TENANT = "tenant"


ACCESS: dict[ApiKey, Access] = {
    ApiKey.API_VERSIONS: Access.ANYONE,
    ApiKey.SASL_HANDSHAKE: Access.ANYONE,
    ApiKey.SASL_AUTHENTICATE: Access.ANYONE,
    ApiKey.CLUSTER_STATE: Access.INTERNAL,
    ApiKey.BROKER_REGISTER: Access.INTERNAL,
    ApiKey.BROKER_HEARTBEAT: Access.INTERNAL,
    ApiKey.ALTER_ISR: Access.INTERNAL,
    ApiKey.DESCRIBE_CREDENTIAL: Access.INTERNAL,
    ApiKey.REPLICA_DAMAGED: Access.INTERNAL,
    ApiKey.WRITE_TXN_MARKERS: Access.INTERNAL,
    ApiKey.INIT_PRODUCER_ID: Access.TENANT,
    ApiKey.ADD_PARTITIONS_TO_TXN: Access.TENANT,
    ApiKey.END_TXN: Access.TENANT,
    ApiKey.ADD_OFFSETS_TO_TXN: Access.TENANT,
    ApiKey.TXN_OFFSET_COMMIT: Access.TENANT,
    ApiKey.DESCRIBE_TRANSACTIONS: Access.TENANT,
    ApiKey.LIST_TRANSACTIONS: Access.TENANT,
    ApiKey.DESCRIBE_CLUSTER: Access.OPERATOR,
    ApiKey.ALTER_CONFIGS: Access.OPERATOR,
    ApiKey.CREATE_TOPICS: Access.TENANT,
    ApiKey.DELETE_TOPICS: Access.TENANT,
    ApiKey.CREATE_PARTITIONS: Access.TENANT,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Access.TENANT,
    ApiKey.PRODUCE: Access.TENANT,
    ApiKey.FETCH: Access.TENANT,
    ApiKey.LIST_OFFSETS: Access.TENANT,
    ApiKey.DELETE_RECORDS: Access.TENANT,
    ApiKey.METADATA: Access.TENANT,
    ApiKey.DESCRIBE_TOPICS: Access.TENANT,
    ApiKey.FIND_COORDINATOR: Access.TENANT,
    ApiKey.OFFSET_COMMIT: Access.TENANT,
    ApiKey.OFFSET_FETCH: Access.TENANT,
    ApiKey.OFFSET_DELETE: Access.TENANT,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: Access.TENANT,
    ApiKey.DESCRIBE_GROUP: Access.TENANT,
    ApiKey.LIST_GROUPS: Access.TENANT,
    ApiKey.DESCRIBE_TRAFFIC: Access.TENANT,
    ApiKey.SHARE_ACQUIRE: Access.TENANT,
    ApiKey.SHARE_ACKNOWLEDGE: Access.TENANT,
}

AfterResponse = Callable[[object], None]
ANY_SCOPE = frozenset({PRODUCE, CONSUME, MANAGE})


class Authorizer:
    def __init__(self, credentials: CredentialStore | None = None, on_refused=lambda api, error: None,
                 on_tenant_request=lambda scope: None) -> None:
        self._credentials = credentials
        self._on_refused = on_refused
        self._on_tenant_request = on_tenant_request  # (the tenant's topic prefix): metered as the tenant's request

    async def authorize(self, session: Session, api: ApiKey, request) -> AfterResponse | None:
        """Raise unless the session may send ``request``; for tenants, rewrite it and return what rewrites the answer."""
        try:
            return await self._authorize(session, api, request)
        except errors.BrokerError as exc:
            self._on_refused(api, exc)
            raise

    async def _authorize(self, session: Session, api: ApiKey, request) -> AfterResponse | None:
        access = ACCESS.get(api)
        if access is None:
            raise errors.AuthorizationFailedError(f"{api.name} has no access rule: refused")
        if access is Access.ANYONE:
            return None
        principal = session.principal
        if principal is None:
            session.close_after_answer = True
            raise errors.SaslAuthenticationFailedError(
                f"{api.name} before authentication: send SASL_HANDSHAKE and SASL_AUTHENTICATE first "
                "(clients: pass an API key with api_key=, --api-key or TIDEWAY_API_KEY)")
        if api is ApiKey.FETCH and request.replica_id == m.INSPECTOR:
            if principal.kind is Kind.TENANT:
                raise errors.AuthorizationFailedError("a FETCH as inspector (not metered) is for the platform's services")
            return None
        if access is Access.INTERNAL or (api is ApiKey.FETCH and request.replica_id != m.CONSUMER):
            if session.listener is not Listener.INTERNAL or principal.kind is not Kind.PEER:
                raise errors.AuthorizationFailedError(f"{api.name} is internal: cluster peers only, on the internal listener")
            return None
        if principal.kind is not Kind.TENANT:
            return None
        if access is Access.OPERATOR:
            raise errors.AuthorizationFailedError(
                f"{api.name} is not open to tenant keys: create and change queues through the REST API or the console")
        await self._check_live(session, principal)
        view = _TENANT_VIEWS[api](principal, request)
        self._on_tenant_request(principal.names.topic_prefix)  # allowed: a request the tenant is billed for
        return view

    async def _check_live(self, session: Session, principal: Principal) -> None:
        credentials = self._credentials
        if credentials is None or credentials.is_fresh(principal):
            return
        try:
            await credentials.check(principal)
        except errors.SaslAuthenticationFailedError:
            session.close_after_answer = True
            raise


# -- tenant views: one per TENANT API -------------------------------------------------------------


def _require(principal: Principal, scopes: frozenset[str], error: type[errors.BrokerError], what: str) -> None:
    if not principal.grant.scopes & scopes:
        needed = " or ".join(sorted(scopes))
        raise error(f"this key may not {what}: it needs the {needed} scope")


def _topic_in(principal: Principal, name: str) -> str:
    """The broker-side name of the tenant's topic ``name``; refused when outside the key's patterns."""
    if not name or not isinstance(name, str):
        raise errors.InvalidTopicError("topic names are 1 or more characters")
    if split_tenant_prefix(name)[0]:
        raise errors.TopicAuthorizationFailedError(f"{name!r} is a broker-side name: name your queues by their own names")
    if not principal.grant.may_touch(name):
        raise errors.TopicAuthorizationFailedError(f"this key may not touch {name!r} (outside its queue patterns)")
    return principal.names.topic(name)


def _topic_out(principal: Principal, broker_name: str) -> str | None:
    """The tenant's name for ``broker_name``, None when it is not one the key may see."""
    name = principal.names.own_topic(broker_name)
    if name is None or not principal.grant.may_touch(name):
        return None
    return name


def _rename_items(principal: Principal, items: list, attribute: str = "topic") -> list:
    """``items`` the key may see, with tenant names and scrubbed error messages."""
    kept = []
    for item in items:
        name = _topic_out(principal, getattr(item, attribute))
        if name is None:
            continue
        setattr(item, attribute, name)
        if getattr(item, "error_message", ""):
            item.error_message = principal.names.scrub(item.error_message)
        kept.append(item)
    return kept


def _group_in(principal: Principal, group_id: str, kind: str) -> str:
    if kind not in GROUP_KINDS:
        raise errors.InvalidRequestError(f"group_type must be one of {', '.join(GROUP_KINDS)}, not {kind!r}")
    if not group_id:
        raise errors.InvalidGroupIdError("group ids are 1 or more characters")
    if split_tenant_prefix(group_id)[0]:
        raise errors.GroupAuthorizationFailedError(f"{group_id!r} is a broker-side name: name your groups by their own names")
    return principal.names.group(group_id, kind)


def _consume_group(principal: Principal, request, kind: str) -> str:
    _require(principal, frozenset({CONSUME}), errors.GroupAuthorizationFailedError, "use consumer groups")
    original = request.group_id
    request.group_id = _group_in(principal, original, kind)
    return original


def _partitions_view(principal: Principal, request, scopes: frozenset[str], what: str) -> AfterResponse:
    """Requests with a list of per-partition parts, answered per partition (produce, fetch, list offsets)."""
    _require(principal, scopes, errors.TopicAuthorizationFailedError, what)
    for part in request.partitions:
        part.topic = _topic_in(principal, part.topic)

    def after(response) -> None:
        if response is not None:  # acks=0 produces have no answer
            response.partitions = _rename_items(principal, response.partitions)

    return after


def _produce(principal: Principal, request: m.ProduceRequest) -> AfterResponse:
    if request.transactional_id:
        request.transactional_id = _transactional_id_in(principal, request.transactional_id)
    return _partitions_view(principal, request, frozenset({PRODUCE}), "produce")


def _fetch(principal: Principal, request: m.FetchRequest) -> AfterResponse:
    return _partitions_view(principal, request, frozenset({CONSUME}), "read")


def _list_offsets(principal: Principal, request: m.ListOffsetsRequest) -> AfterResponse:
    return _partitions_view(principal, request, ANY_SCOPE, "read offsets")


def _delete_records(principal: Principal, request: m.DeleteRecordsRequest) -> AfterResponse:
    return _partitions_view(principal, request, frozenset({MANAGE}), "delete records (purge queues)")


def _offset_for_leader_epoch(principal: Principal, request: m.OffsetForLeaderEpochRequest) -> AfterResponse:
    return _partitions_view(principal, request, ANY_SCOPE, "read offsets")


def _manage(principal: Principal, request) -> None:
    """A topic-admin request of a tenant: the manage scope, and marked as the tenant's (never trusted from it)."""
    _require(principal, frozenset({MANAGE}), errors.TopicAuthorizationFailedError, "create, grow or delete queues")
    request.tenant_id = principal.tenant_id
    request.acting = principal.name


def _create_topics(principal: Principal, request: m.CreateTopicsRequest) -> AfterResponse:
    _manage(principal, request)
    for topic in request.topics:
        topic.name = _topic_in(principal, topic.name)

    def after(response: m.CreateTopicsResponse) -> None:
        response.topics = _rename_items(principal, response.topics, "name")

    return after


def _delete_topics(principal: Principal, request: m.DeleteTopicsRequest) -> AfterResponse:
    _manage(principal, request)
    request.names = [_topic_in(principal, name) for name in request.names]

    def after(response: m.DeleteTopicsResponse) -> None:
        response.topics = _rename_items(principal, response.topics, "name")

    return after


def _create_partitions(principal: Principal, request: m.CreatePartitionsRequest) -> AfterResponse:
    _manage(principal, request)
    request.topic = _topic_in(principal, request.topic)

    def after(response: m.CreatePartitionsResponse) -> None:
        response.error_message = principal.names.scrub(response.error_message)

    return after


def _metadata(principal: Principal, request: m.MetadataRequest) -> AfterResponse:
    _require(principal, ANY_SCOPE, errors.TopicAuthorizationFailedError, "read metadata")
    if request.topics is not None:
        request.topics = [_topic_in(principal, name) for name in request.topics]

    def after(response: m.MetadataResponse) -> None:
        response.topics = _rename_items(principal, response.topics, "name")
        response.controller_address = ""  # the controller is not a tenant's business

    return after


def _describe_topics(principal: Principal, request: m.DescribeTopicsRequest) -> AfterResponse:
    _require(principal, ANY_SCOPE, errors.TopicAuthorizationFailedError, "describe topics")
    if request.names is not None:
        request.names = [_topic_in(principal, name) for name in request.names]

    def after(response: m.DescribeTopicsResponse) -> None:
        response.topics = _rename_items(principal, response.topics, "name")
        for topic in response.topics:
            topic.configs = {key: principal.names.scrub(value) for key, value in topic.configs.items()}

    return after


def _find_coordinator(principal: Principal, request: m.FindCoordinatorRequest) -> None:
    if request.group_type == "transaction":
        request.group_id = _transactional_id_in(principal, request.group_id)
        return
    _consume_group(principal, request, request.group_type or "stream")


def _transactional_id_in(principal: Principal, transactional_id: str) -> str:
    """The broker-side name of a tenant's transactional id (the produce scope: transactions write)."""
    _require(principal, frozenset({PRODUCE}), errors.TransactionalIdAuthorizationFailedError, "use transactions")
    if not transactional_id or not isinstance(transactional_id, str):
        raise errors.InvalidRequestError("transactional ids are 1 or more characters")
    if split_tenant_prefix(transactional_id)[0]:
        raise errors.TransactionalIdAuthorizationFailedError(
            f"{transactional_id!r} is a broker-side name: name your transactional ids by their own names")
    return principal.names.transactional_id(transactional_id)


def _init_producer_id(principal: Principal, request: m.InitProducerIdRequest) -> None:
    request.transactional_id = _transactional_id_in(principal, request.transactional_id)


def _add_partitions_to_txn(principal: Principal, request: m.AddPartitionsToTxnRequest) -> AfterResponse:
    request.transactional_id = _transactional_id_in(principal, request.transactional_id)
    for ref in request.partitions:
        ref.topic = _topic_in(principal, ref.topic)

    def after(response: m.AddPartitionsToTxnResponse) -> None:
        response.results = _rename_items(principal, response.results)

    return after


def _add_offsets_to_txn(principal: Principal, request: m.AddOffsetsToTxnRequest) -> None:
    request.transactional_id = _transactional_id_in(principal, request.transactional_id)
    _consume_group(principal, request, "stream")


def _txn_offset_commit(principal: Principal, request: m.TxnOffsetCommitRequest) -> AfterResponse:
    request.transactional_id = _transactional_id_in(principal, request.transactional_id)
    return _offset_commit(principal, request)


def _end_txn(principal: Principal, request: m.EndTxnRequest) -> AfterResponse:
    request.transactional_id = _transactional_id_in(principal, request.transactional_id)

    def after(response: m.EndTxnResponse) -> None:
        response.error_message = principal.names.scrub(response.error_message)

    return after


def _describe_transactions(principal: Principal, request: m.DescribeTransactionsRequest) -> AfterResponse:
    request.transactional_ids = [_transactional_id_in(principal, t) for t in request.transactional_ids]

    def after(response: m.DescribeTransactionsResponse) -> None:
        response.transactions = _own_transactions(principal, response.transactions)

    return after


def _list_transactions(principal: Principal, request: m.ListTransactionsRequest) -> AfterResponse:
    _require(principal, frozenset({PRODUCE}), errors.TransactionalIdAuthorizationFailedError, "list transactions")

    def after(response: m.ListTransactionsResponse) -> None:
        response.transactions = _own_transactions(principal, response.transactions)

    return after


def _own_transactions(principal: Principal, transactions: list) -> list:
    """The tenant's own transactions, by its names (with the partitions its key may see)."""
    kept = []
    for txn in transactions:
        own = principal.names.own_transactional_id(txn.transactional_id)
        if own is None:
            continue
        txn.transactional_id = own
        txn.partitions = _rename_items(principal, txn.partitions)
        txn.error_message = principal.names.scrub(txn.error_message)
        kept.append(txn)
    return kept


def _offset_commit(principal: Principal, request: m.OffsetCommitRequest) -> AfterResponse:
    _consume_group(principal, request, "stream")
    for item in request.offsets:
        item.topic = _topic_in(principal, item.topic)

    def after(response: m.OffsetCommitResponse) -> None:
        response.offsets = _rename_items(principal, response.offsets)

    return after


def _offset_fetch(principal: Principal, request: m.OffsetFetchRequest) -> AfterResponse:
    _consume_group(principal, request, "stream")
    for ref in request.partitions or ():
        ref.topic = _topic_in(principal, ref.topic)

    def after(response: m.OffsetFetchResponse) -> None:
        response.offsets = _rename_items(principal, response.offsets)

    return after


def _offset_delete(principal: Principal, request: m.OffsetDeleteRequest) -> AfterResponse:
    _consume_group(principal, request, "stream")  # (whoever may commit a group's positions may forget them)
    for ref in request.partitions:
        ref.topic = _topic_in(principal, ref.topic)

    def after(response: m.OffsetDeleteResponse) -> None:
        response.partitions = _rename_items(principal, response.partitions)

    return after


def _heartbeat(principal: Principal, request: m.ConsumerGroupHeartbeatRequest) -> AfterResponse:
    _consume_group(principal, request, "stream")
    if request.topics is not None:
        request.topics = [_topic_in(principal, name) for name in request.topics]
    for ref in request.owned or ():
        ref.topic = _topic_in(principal, ref.topic)

    def after(response: m.ConsumerGroupHeartbeatResponse) -> None:
        response.assignment = _rename_items(principal, response.assignment)

    return after


def _describe_group(principal: Principal, request: m.DescribeGroupRequest) -> AfterResponse:
    _require(principal, frozenset({CONSUME, MANAGE}), errors.GroupAuthorizationFailedError, "describe groups")
    original = request.group_id
    request.group_id = _group_in(principal, original, request.group_type or "stream")

    def after(response: m.DescribeGroupResponse) -> None:
        response.group_id = original
        for member in response.members:
            member.topics = [name for name in (_topic_out(principal, t) for t in member.topics) if name is not None]
            member.assigned = _rename_items(principal, member.assigned)
            member.revoking = _rename_items(principal, member.revoking)
        response.offsets = _rename_items(principal, response.offsets)
        response.share_partitions = _rename_items(principal, response.share_partitions)

    return after


def _list_groups(principal: Principal, request: m.ListGroupsRequest) -> AfterResponse:
    _require(principal, frozenset({CONSUME, MANAGE}), errors.GroupAuthorizationFailedError, "list groups")
    if request.topic is not None:
        request.topic = _topic_in(principal, request.topic)

    def after(response: m.ListGroupsResponse) -> None:
        kept = []
        for group in response.groups:
            own = principal.names.own_group(group.group_id)
            if own is not None:
                group.group_id, group.group_type = own
                group.positions = _rename_items(principal, group.positions)
                kept.append(group)
        response.groups = kept

    return after


def _describe_traffic(principal: Principal, request: m.DescribeTrafficRequest) -> AfterResponse:
    _require(principal, ANY_SCOPE, errors.TopicAuthorizationFailedError, "read traffic")
    request.topics = [_topic_in(principal, name) for name in request.topics]
    if request.history_scope is not None:
        if principal.grant.queue_patterns and "*" not in principal.grant.queue_patterns:
            raise errors.TopicAuthorizationFailedError(
                "the traffic history covers all the tenant's queues; this key is limited to some (ask per queue)")
        request.history_scope = principal.names.topic_prefix  # a tenant's history is its own, whatever it asked

    def after(response: m.DescribeTrafficResponse) -> None:
        response.topics = _rename_items(principal, response.topics)

    return after


def _share_acquire(principal: Principal, request: m.ShareAcquireRequest) -> None:
    # Nothing in the answer names a topic or group (dead-letter headers carry the tenant's names).
    _consume_group(principal, request, "queue")
    request.topic = _topic_in(principal, request.topic)


def _share_acknowledge(principal: Principal, request: m.ShareAcknowledgeRequest) -> AfterResponse:
    _consume_group(principal, request, "queue")
    request.topic = _topic_in(principal, request.topic)

    def after(response: m.ShareAcknowledgeResponse) -> None:
        for result in response.results:
            result.error_message = principal.names.scrub(result.error_message)
        for result in response.accept_failures:
            result.error_message = principal.names.scrub(result.error_message)

    return after


_TENANT_VIEWS: dict[ApiKey, Callable[[Principal, object], AfterResponse | None]] = {
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.DELETE_RECORDS: _delete_records,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.METADATA: _metadata,
    ApiKey.DESCRIBE_TOPICS: _describe_topics,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.OFFSET_DELETE: _offset_delete,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _heartbeat,
    ApiKey.DESCRIBE_GROUP: _describe_group,
    ApiKey.LIST_GROUPS: _list_groups,
    ApiKey.DESCRIBE_TRAFFIC: _describe_traffic,
    ApiKey.SHARE_ACQUIRE: _share_acquire,
    ApiKey.SHARE_ACKNOWLEDGE: _share_acknowledge,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    ApiKey.END_TXN: _end_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: _add_offsets_to_txn,
    ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
    ApiKey.DESCRIBE_TRANSACTIONS: _describe_transactions,
    ApiKey.LIST_TRANSACTIONS: _list_transactions,
}
assert set(_TENANT_VIEWS) == {api for api, access in ACCESS.items() if access is Access.TENANT}
