"""The session app every site starts with: JupyterLab served by jupyterhub-singleuser (admins add others)."""

from django.db import migrations


def add(apps, schema_editor):
    apps.get_model("kh_sessions", "SessionApp").objects.get_or_create(slug="jupyterlab", defaults={
        "name": "JupyterLab", "command": "jupyterhub-singleuser", "needs": ["jupyterlab"],
        "description": "JupyterLab on the first node of the allocation, opened through the hub"})


class Migration(migrations.Migration):
    dependencies = [("kh_sessions", "0001_initial")]
    operations = [migrations.RunPython(add, migrations.RunPython.noop)]
