"""Routes of the data gateway under /api/v1/ (the WebSocket route is in gateway.routing)."""

from django.urls import re_path
from tideway_server.gateway.views import dead_letters, messages, queue_model, stream, tokens

Q = r"^queues/(?P<name>[A-Za-z0-9._-]{1,100})"
G = r"/groups/(?P<group>[A-Za-z0-9._-]{1,100})"

urlpatterns = [
    re_path(r"^tokens$", tokens.TokensView.as_view()),
    re_path(r"^publish$", messages.AtomicPublishView.as_view()),
    re_path(Q + r"/messages$", messages.MessagesView.as_view()),
    re_path(Q + r"/purge$", messages.PurgeView.as_view()),
    re_path(Q + G + r"/receive$", queue_model.ReceiveView.as_view()),
    re_path(Q + G + r"/ack$", queue_model.SettleView.as_view(action="ack")),
    re_path(Q + G + r"/nack$", queue_model.SettleView.as_view(action="nack")),
    re_path(Q + G + r"/reject$", queue_model.SettleView.as_view(action="reject")),
    re_path(Q + G + r"/extend$", queue_model.SettleView.as_view(action="extend")),
    re_path(Q + r"/partitions/(?P<partition>[0-9]{1,6})/messages$", stream.PartitionMessagesView.as_view()),
    re_path(Q + r"/partitions/(?P<partition>[0-9]{1,6})/offsets$", stream.PartitionOffsetsView.as_view()),
    re_path(Q + G + r"/offsets$", stream.GroupOffsetsView.as_view()),
    re_path(Q + G + r"/seek$", stream.SeekView.as_view()),
    re_path(Q + G + r"/members$", stream.MembersView.as_view()),
    re_path(Q + G + r"/members/(?P<member_id>[A-Za-z0-9._-]{1,100})$", stream.MemberView.as_view()),
    re_path(Q + r"/dead-letters$", dead_letters.DeadLettersView.as_view()),
    re_path(Q + r"/dead-letters/redrive$", dead_letters.RedriveView.as_view()),
    re_path(Q + r"/dead-letters/redrives/(?P<job_id>[0-9a-f]{32})$", dead_letters.RedriveJobView.as_view()),
]
