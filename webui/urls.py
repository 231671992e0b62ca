"""Routes of the console, under /console/."""

from django.urls import path, re_path

from webui.views import (
    auth,
    dashboard,
    dead_letters,
    keys,
    members,
    messages,
    operators,
    queues,
    schemas,
)

NAME = r"(?P<name>[A-Za-z0-9._-]{1,100})"

urlpatterns = [
    path("", dashboard.dashboard),
    path("behind", dashboard.behind),
    path("traffic", dashboard.traffic),
    path("dead-letter-totals", dashboard.dead_letter_totals),
    path("signin", auth.signin),
    path("signup", auth.signup),
    path("signout", auth.signout),
    path("password", auth.password_change),
    path("tenant", auth.switch_tenant),
    path("operator/clusters", operators.clusters),
    path("operator/tenants", operators.tenants),
    re_path(r"^operator/tenants/(?P<slug>[a-z0-9-]{1,50})/suspend$", operators.suspend),
    path("operator/plans", operators.plans),
    path("schemas", schemas.subjects),
    re_path(r"^schemas/(?P<subject>[A-Za-z0-9._:-]{1,255})$", schemas.subject),
    path("members", members.members),
    path("settings", members.settings),
    path("audit", members.audit),
    path("audit/export", members.audit_export),
    path("keys", keys.keys),
    re_path(r"^keys/(?P<prefix>[0-9a-f]{1,16})/revoke$", keys.revoke),
    path("queues", queues.queue_list),
    path("create-queue", queues.queue_create),  # not under queues/: a queue may be named "new"
    re_path(rf"^queues/{NAME}$", queues.queue_detail),
    re_path(rf"^queues/{NAME}/partitions$", queues.queue_partitions),
    re_path(rf"^queues/{NAME}/groups$", queues.queue_groups),
    re_path(rf"^queues/{NAME}/counters$", queues.queue_counters),
    re_path(rf"^queues/{NAME}/groups/(?P<group>[A-Za-z0-9._-]{{1,100}})$", queues.group_detail),
    re_path(rf"^queues/{NAME}/groups/(?P<group>[A-Za-z0-9._-]{{1,100}})/reset$", queues.group_reset),
    re_path(rf"^queues/{NAME}/delete$", queues.queue_delete),
    re_path(rf"^queues/{NAME}/edit$", queues.queue_edit),
    re_path(rf"^queues/{NAME}/messages$", messages.messages),
    re_path(rf"^queues/{NAME}/messages/export$", messages.export),
    re_path(rf"^queues/{NAME}/messages/searches/(?P<job_id>[0-9a-f]{{32}})$", messages.search_job),
    re_path(rf"^queues/{NAME}/produce$", messages.produce),
    re_path(rf"^queues/{NAME}/dead-letters$", dead_letters.dead_letters),
    re_path(rf"^queues/{NAME}/dead-letters/redrive$", dead_letters.redrive),
    re_path(rf"^queues/{NAME}/dead-letters/purge$", dead_letters.purge),
    re_path(rf"^queues/{NAME}/dead-letters/redrives/(?P<job_id>[0-9a-f]{{32}})$", dead_letters.redrive_job),
]
