"""When the shop knew each gateway transaction closed (a new attempt waits for the earlier ones to close)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('payments', '0007_gateway_transactions'),
    ]

    operations = [
        migrations.AddField(
            model_name='gatewaytransaction',
            name='closed_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
