# The kinds a cluster may be come from the backend registry: a new backend needs no migration.

import backends
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('clusters', '0002_cluster_contact'),
    ]

    operations = [
        migrations.AlterField(
            model_name='cluster',
            name='kind',
            field=models.CharField(choices=backends.kind_choices, max_length=16),
        ),
    ]
