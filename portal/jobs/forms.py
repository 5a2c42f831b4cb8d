from __future__ import annotations

import ast
import uuid
from typing import Any

from django import forms
from django.conf import settings
from django.urls import reverse

from portal.catalog.job_templates import TEMPLATES
from portal.catalog.models import HardwareType, Software
from portal.jobs import notebooks
from portal.jobs.models import Job
from portal.projects.models import Project
from portal.storage.models import Dataset, StoredFile

# The form's inputs for a notebook's parameters are named PARAM_PREFIX + the parameter's name.
PARAM_PREFIX = "param_"


class TemplateSelect(forms.Select):
    """Each template option says what software it needs (data-requires), so the page can pick software."""

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        template = TEMPLATES.get(str(value))
        if template is not None and template.requires:
            option["attrs"]["data-requires"] = " ".join(template.requires)
        return option


class SoftwareSelect(forms.Select):
    """Each software option says what it provides and on which clusters (ids), for the template's choice."""

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        software = getattr(value, "instance", None)
        if software is not None:
            option["attrs"]["data-provides"] = " ".join(software.provides or ())
            option["attrs"]["data-clusters"] = " ".join(str(c.pk) for c in software.clusters.all())
        return option


class ProjectOptions(forms.SelectMultiple):
    """Each option says whose it is (data-project: the project's id), so the form offers only the chosen project's
    (static/kakehashi.js hides the others when the project changes)."""

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex=subindex, attrs=attrs)
        instance = getattr(value, "instance", None)
        if instance is not None:
            option["attrs"]["data-project"] = str(instance.project_id)
        return option


class JobForm(forms.Form):
    project = forms.ModelChoiceField(queryset=Project.objects.none(), empty_label=None)
    name = forms.CharField(
        max_length=63,
        help_text="Letters, digits, '.', '_' and '-'; starts with a letter. Shown in the scheduler's queue.",
    )
    hardware = forms.ModelChoiceField(queryset=HardwareType.objects.none(), empty_label="Choose hardware…")
    software = forms.ModelChoiceField(queryset=Software.objects.none(), required=False, empty_label="None (plain shell)",
                                      widget=SoftwareSelect,
                                      help_text="A template picks software that provides what it needs on the chosen cluster.")
    nodes = forms.IntegerField(min_value=1, initial=1)
    walltime = forms.CharField(initial="01:00:00", help_text="HH:MM:SS, or 90m, 2h, 1d")
    launcher = forms.ChoiceField(choices=Job.Launcher.choices, initial=Job.Launcher.SCRIPT)
    procs_per_node = forms.IntegerField(
        min_value=0, max_value=1024, initial=0, required=False, label="Processes per node",
        help_text="0 = one per GPU (torchrun, mpirun)",
    )
    template = forms.ChoiceField(required=False, label="Template", widget=TemplateSelect,
                                 choices=[("", "None: my own script")] + [(t.slug, t.name) for t in TEMPLATES.values()])
    sweep = forms.CharField(
        required=False,
        label="Parameter sweep",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "class": "font-monospace", "placeholder": "LR=0.1,0.01\nEPOCHS=2,4"}),
        help_text="Optional. One NAME=value,value,… per line: one job per combination, each with NAME set.",
    )
    script = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false", "class": "font-monospace"}),
        help_text="Bash. Runs in the job's own directory; write results to $KAKEHASHI_OUTPUT_DIR. Not used with a notebook.",
    )
    notebook_file = forms.FileField(
        required=False, label="Notebook", widget=forms.FileInput(attrs={"accept": ".ipynb"}),
        help_text="Optional: a Jupyter notebook (.ipynb) to run with papermill instead of the script.",
    )
    stored_notebook = forms.ModelChoiceField(
        queryset=StoredFile.objects.none(), required=False, label="or a notebook from the project's storage",
        empty_label="None",
    )
    # A notebook already read (a refused submit, a clone): kept so that nothing has to be chosen again.
    notebook_json = forms.CharField(required=False, widget=forms.HiddenInput)
    datasets = forms.ModelMultipleChoiceField(
        queryset=Dataset.objects.none(), required=False, label="Datasets", widget=ProjectOptions,
        help_text="Optional: data of the project the job reads at $KAKEHASHI_DATA/<name> (staged to the cluster before "
                  "it is queued; a copy already there is not sent again).",
    )
    env = forms.CharField(
        required=False,
        strip=False,  # a value's own leading or trailing spaces are part of it
        label="Environment variables",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "class": "font-monospace", "placeholder": "NCCL_DEBUG=INFO"}),
        help_text="One NAME=value per line.",
    )
    working_directory = forms.CharField(
        required=False, max_length=255, label="Working directory",
        help_text="Optional, on the cluster (e.g. ~/projects/vit). Outputs still go to the job's own directory.",
    )
    edited_script = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 20, "spellcheck": "false", "class": "font-monospace"}))
    draft = forms.UUIDField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args, projects=None, hardware=None, software=None, stored_notebooks=None, user=None,
                 datasets=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["datasets"].queryset = datasets if datasets is not None else Dataset.objects.none()
        self.fields["datasets"].label_from_instance = lambda d: f"{d.project.slug}: {d.name} ({d.source})"
        self.fields["project"].queryset = projects if projects is not None else Project.objects.none()
        self.fields["stored_notebook"].queryset = stored_notebooks if stored_notebooks is not None else StoredFile.objects.none()
        self.fields["stored_notebook"].label_from_instance = lambda f: f"{f.project.slug}: {f.path}"
        self.fields["hardware"].queryset = hardware if hardware is not None else HardwareType.objects.none()
        self.fields["software"].queryset = (software if software is not None else Software.objects.none()).prefetch_related("clusters")
        if not self.is_bound:
            self.initial.setdefault("draft", uuid.uuid4())
        # Presets depend on what the project may use: swap them in again when the project changes.
        self.fields["project"].widget.attrs.update(
            {"hx-get": reverse("job-presets"), "hx-target": "#presets-block", "hx-trigger": "change", "hx-swap": "innerHTML"}
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        data["notebook"], data["parameters"] = self._notebook(data), self.notebook_parameters()
        if data["notebook"] is not None:
            # Kept in the page, so that a refused submit does not ask for the file again.
            self.data = self.data.copy()
            self.data["notebook_json"] = _json(data["notebook"])
        return data

    def _notebook(self, data: dict[str, Any]) -> dict[str, Any] | None:
        """The notebook the form names: an upload, a file of the project's storage, or one kept from before."""
        from portal.storage.actions import open_file
        from portal.storage.errors import StorageError

        upload, stored, kept = data.get("notebook_file"), data.get("stored_notebook"), data.get("notebook_json")
        field = "notebook_file" if upload else "stored_notebook" if stored else "notebook_json"
        limit = settings.KAKEHASHI_MAX_NOTEBOOK_BYTES
        try:
            if upload:
                if upload.size > limit:
                    raise notebooks.NotebookError(notebooks.too_large(limit))
                return notebooks.loads(upload.read())
            if stored:
                project = data.get("project")
                if project is not None and stored.project_id != project.pk:
                    raise notebooks.NotebookError(f"{stored.path} is a file of project {stored.project.slug}, not of {project.slug}")
                if stored.size > limit:
                    raise notebooks.NotebookError(notebooks.too_large(limit))
                with open_file(self.user, stored) as f:
                    return notebooks.loads(f.read(limit + 1))
            if kept:
                return notebooks.loads(kept)
        except notebooks.NotebookError as exc:
            self.add_error(field if field != "notebook_json" else "notebook_file", exc.message)
        except StorageError as exc:
            self.add_error(field, str(exc))
        return None

    def notebook_parameters(self) -> dict[str, Any]:
        """The values typed for the notebook's parameters, as Python literals where they are one (0.1, "a", [1, 2]),
        else as text, as the API's `parameters` hold them. Empty inputs keep the notebook's own value."""
        values: dict[str, Any] = {}
        for key, raw in self.data.items():
            if key.startswith(PARAM_PREFIX) and isinstance(raw, str) and raw.strip():
                values[key[len(PARAM_PREFIX):]] = python_value(raw)
        return values

    def clean_procs_per_node(self) -> int:
        return self.cleaned_data.get("procs_per_node") or 0

    def clean_sweep(self) -> dict[str, list]:
        sweep: dict[str, list] = {}
        for number, line in enumerate(self.cleaned_data.get("sweep", "").splitlines(), 1):
            if not line.strip():
                continue
            name, sep, values = line.partition("=")
            if not sep or not values.strip():
                raise forms.ValidationError(f"line {number}: write NAME=value,value,…")
            sweep[name.strip()] = [_number_or_text(v.strip()) for v in values.split(",") if v.strip()]
        return sweep

    def clean_env(self) -> dict[str, str]:
        env: dict[str, str] = {}
        # Lines end at \n only: splitlines() would also break at U+0085, U+2028, \v… inside a value, turning its
        # rest into a line of its own; kept in the value, check_env refuses them with a message instead.
        text = self.cleaned_data.get("env", "").replace("\r\n", "\n")
        for number, line in enumerate(text.split("\n"), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            name, sep, value = line.partition("=")
            if not sep:
                raise forms.ValidationError(f"line {number}: write NAME=value")
            env[name.strip()] = value.removesuffix("\r")
        return env


def python_value(text: str) -> Any:
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def _number_or_text(value: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            continue
    return value
