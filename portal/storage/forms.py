from __future__ import annotations

from django import forms

from portal.projects.models import Project


class UploadForm(forms.Form):
    project = forms.ModelChoiceField(queryset=Project.objects.none(), to_field_name="slug")
    file = forms.FileField()
    path = forms.CharField(required=False, max_length=512, help_text="e.g. data/train.csv; blank = the file's name, "
                           "ending in / = into that folder")
    overwrite = forms.BooleanField(required=False, label="Replace a file already at this path")

    def __init__(self, *args, projects, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["project"].queryset = projects
