from django.db import migrations, models


class Migration(migrations.Migration):
    """Where Kafka clients reach a broker (its Kafka listener), registered like its other listeners."""

    dependencies = [
        ("clusters", "0003_broker_internal_listener"),
    ]

    operations = [
        migrations.AddField(
            model_name="broker",
            name="kafka_host",
            field=models.CharField(blank=True, default="", max_length=255),
        ),
        migrations.AddField(
            model_name="broker",
            name="kafka_port",
            field=models.IntegerField(default=-1),
        ),
    ]
