# The submit path's bookkeeping (docs/decisions/0024): an array's script kept once by its group, and the cluster
# account a job was rendered for kept with it (the dispatch reads it with the job's row).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('clusters', '0007_merge_health_and_data_root'),
        ('jobs', '0009_merge_metrics'),
    ]

    operations = [
        # The column keeps its name: only the model's attribute changes (rendered_script is now a property).
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.RenameField(model_name='job', old_name='rendered_script', new_name='own_script'),
            migrations.AlterField(
                model_name='job',
                name='own_script',
                field=models.TextField(blank=True, db_column='rendered_script', help_text="the exact job script handed to the scheduler (blank: its array's)"),
            ),
        ]),
        migrations.AddField(
            model_name='jobgroup',
            name='rendered_script',
            field=models.TextField(blank=True, help_text="the array's job script, which its elements share"),
        ),
        migrations.AddField(
            model_name='job',
            name='cluster_account',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='clusters.clusteraccount'),
        ),
    ]
