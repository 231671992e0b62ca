import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("topics", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="queue",
            name="sqs_settings",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="queue",
            name="dead_letter_queue",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL,
                                    related_name="dead_letter_sources", to="topics.queue"),
        ),
    ]
