from django.db import migrations


def create_new_plans(apps, schema_editor):
    from tideway_server.tenants.models.plans import DEFAULT_PLANS

    Plan = apps.get_model("billing", "Plan")
    for plan in DEFAULT_PLANS:
        Plan.objects.get_or_create(name=plan["name"], defaults=plan)  # plans an operator changed stay as they are


class Migration(migrations.Migration):
    dependencies = [("billing", "0003_invoices")]

    operations = [migrations.RunPython(create_new_plans, migrations.RunPython.noop)]
