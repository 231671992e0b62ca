"""Plans now live in tenants (tenants 0004): drop the model from billing's state; its table stays, as tenants'."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0005_connections_per_key'),
        ('tenants', '0004_plan_moves_from_billing'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[migrations.DeleteModel(name='Plan')]),
    ]
