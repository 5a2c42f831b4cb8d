from __future__ import annotations

import uuid

from django import forms
from django.urls import reverse

from portal.catalog.job_templates import TEMPLATES
from portal.catalog.models import HardwareType, Software
from portal.jobs.models import Job
from portal.projects.models import Project


class JobForm(forms.Form):
    project = forms.ModelChoiceField(queryset=Project.objects.none(), empty_label=None)
    name = forms.CharField(
        max_length=63,
        help_text="Letters, digits, '.', '_' and '-'; starts with a letter. Shown in the scheduler's queue.",
    )
    hardware = forms.ModelChoiceField(queryset=HardwareType.objects.none(), empty_label="Choose hardware…")
    software = forms.ModelChoiceField(queryset=Software.objects.none(), required=False, empty_label="None (plain shell)")
    nodes = forms.IntegerField(min_value=1, initial=1)
    walltime = forms.CharField(initial="01:00:00", help_text="HH:MM:SS, or 90m, 2h, 1d")
    launcher = forms.ChoiceField(choices=Job.Launcher.choices, initial=Job.Launcher.SCRIPT)
    procs_per_node = forms.IntegerField(
        min_value=0, max_value=1024, initial=0, required=False, label="Processes per node",
        help_text="0 = one per GPU (torchrun, mpirun)",
    )
    template = forms.ChoiceField(required=False, label="Template",
                                 choices=[("", "None: my own script")] + [(t.slug, t.name) for t in TEMPLATES.values()])
    sweep = forms.CharField(
        required=False,
        label="Parameter sweep",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "class": "font-monospace", "placeholder": "LR=0.1,0.01\nEPOCHS=2,4"}),
        help_text="Optional. One NAME=value,value,… per line: one job per combination, each with NAME set.",
    )
    script = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false", "class": "font-monospace"}),
        help_text="Bash. Runs in the job's own directory; write results to $KAKEHASHI_OUTPUT_DIR.",
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

    def __init__(self, *args, projects=None, hardware=None, software=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["project"].queryset = projects if projects is not None else Project.objects.none()
        self.fields["hardware"].queryset = hardware if hardware is not None else HardwareType.objects.none()
        self.fields["software"].queryset = software if software is not None else Software.objects.none()
        if not self.is_bound:
            self.initial.setdefault("draft", uuid.uuid4())
        # Presets depend on what the project may use: swap them in again when the project changes.
        self.fields["project"].widget.attrs.update(
            {"hx-get": reverse("job-presets"), "hx-target": "#presets-block", "hx-trigger": "change", "hx-swap": "innerHTML"}
        )

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


def _number_or_text(value: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            continue
    return value
