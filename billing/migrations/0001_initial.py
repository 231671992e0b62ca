from django.db import migrations, models


def create_default_plans(apps, schema_editor):
    from tideway_server.tenants.models.plans import DEFAULT_PLANS

    Plan = apps.get_model("billing", "Plan")
    for plan in DEFAULT_PLANS:
        Plan.objects.update_or_create(name=plan["name"], defaults=plan)


class Migration(migrations.Migration):
    initial = True
    dependencies: list = []

    operations = [
        migrations.CreateModel(
            name="Plan",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.SlugField(unique=True)),
                ("display_name", models.CharField(max_length=100)),
                ("max_queues", models.PositiveIntegerField()),
                ("max_partitions", models.PositiveIntegerField()),
                ("max_storage_bytes", models.BigIntegerField()),
                ("max_publish_bytes_per_s", models.BigIntegerField()),
                ("max_consume_bytes_per_s", models.BigIntegerField()),
                ("max_requests_per_s", models.PositiveIntegerField()),
                ("max_message_bytes", models.PositiveIntegerField()),
                ("max_retention_ms", models.BigIntegerField()),
                ("monthly_price_cents", models.PositiveIntegerField(default=0)),
            ],
            options={"ordering": ["monthly_price_cents", "name"]},
        ),
        migrations.RunPython(create_default_plans, migrations.RunPython.noop),
    ]
