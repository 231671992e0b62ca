from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("tenants", "0006_invitations")]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="aws_credentials_salt",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
    ]
