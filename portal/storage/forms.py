from __future__ import annotations

from django import forms

from portal.projects.models import Project


class ProjectForm(forms.Form):
    """A form about one of `projects` (those the user may submit to), chosen by slug."""

    project = forms.ModelChoiceField(queryset=Project.objects.none(), to_field_name="slug")

    def __init__(self, *args, projects, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["project"].queryset = projects


class UploadForm(ProjectForm):
    file = forms.FileField()
    path = forms.CharField(required=False, max_length=512, help_text="e.g. data/train.csv; blank = the file's name, "
                           "ending in / = into that folder")
    overwrite = forms.BooleanField(required=False, label="Replace a file already at this path")


class DatasetForm(ProjectForm):
    """Name a file or a folder of a project's storage as a dataset (the Data page). Registering a path on a cluster
    stays in the API and the CLI, for project admins (it lends the project's storage there to every member's jobs)."""

    SOURCES = [("file", "A file"), ("folder", "A folder (every file under it)")]

    name = forms.CharField(max_length=100, help_text="jobs find it at $KAKEHASHI_DATA/<name>")
    source = forms.ChoiceField(choices=SOURCES, initial="file", widget=forms.RadioSelect(attrs={"class": "form-check-input"}))
    path = forms.CharField(max_length=512, help_text="e.g. data/train.csv, or data/images for a folder")
