from django.db import migrations, models

CONNECTIONS_PER_KEY = {"free": 20, "team": 100, "business": 500, "enterprise": 1_000}  # as tenants.models.plans


def set_connections(apps, schema_editor):
    Plan = apps.get_model("billing", "Plan")
    for name, connections in CONNECTIONS_PER_KEY.items():
        Plan.objects.filter(name=name).update(max_connections_per_key=connections)


class Migration(migrations.Migration):
    dependencies = [("billing", "0004_enterprise_plan")]

    operations = [
        migrations.AddField(model_name="plan", name="max_connections_per_key",
                            field=models.PositiveIntegerField(default=100)),
        migrations.RunPython(set_connections, migrations.RunPython.noop),
    ]
