"""Plans move from billing to tenants: the control plane reads a tenant's quotas without importing billing.

State only: the table stays ``billing_plan`` (the model's ``db_table``) and the tenants' foreign key keeps
pointing at it, so no row moves and no constraint changes; billing 0006 drops the model from its state.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tenants', '0003_suspended_at'),
        ('billing', '0005_connections_per_key'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.CreateModel(
                name='Plan',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.SlugField(unique=True)),
                    ('display_name', models.CharField(max_length=100)),
                    ('max_queues', models.PositiveIntegerField()),
                    ('max_partitions', models.PositiveIntegerField()),
                    ('max_storage_bytes', models.BigIntegerField()),
                    ('max_publish_bytes_per_s', models.BigIntegerField()),
                    ('max_consume_bytes_per_s', models.BigIntegerField()),
                    ('max_requests_per_s', models.PositiveIntegerField()),
                    ('max_message_bytes', models.PositiveIntegerField()),
                    ('max_retention_ms', models.BigIntegerField()),
                    ('max_connections_per_key', models.PositiveIntegerField(default=100)),
                    ('monthly_price_cents', models.PositiveIntegerField(default=0)),
                ],
                options={
                    'db_table': 'billing_plan',
                    'ordering': ['monthly_price_cents', 'name'],
                },
            ),
            migrations.AlterField(
                model_name='tenant',
                name='plan',
                field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='tenants',
                                        to='tenants.plan'),
            ),
        ]),
    ]
