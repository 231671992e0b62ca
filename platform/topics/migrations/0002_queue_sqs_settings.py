from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("topics", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="queue",
            name="sqs_settings",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
