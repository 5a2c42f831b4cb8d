from __future__ import annotations

from django import forms

from portal.catalog.models import HardwareType, Software
from portal.projects.models import Project
from portal.sessions.actions import default_app
from portal.sessions.models import SessionApp
from portal.sessions.queries import session_choices


class SessionForm(forms.Form):
    """Sessions → New: what a session runs on, for how long; the estimate and the budget left show before Start."""

    project = forms.ModelChoiceField(queryset=Project.objects.none(), empty_label=None)
    app = forms.ModelChoiceField(queryset=SessionApp.objects.filter(enabled=True), empty_label=None, label="App")
    software = forms.ModelChoiceField(queryset=Software.objects.none(), empty_label="Choose software…",
                                      help_text="software that provides what the app needs (JupyterLab) on that cluster")
    hardware = forms.ModelChoiceField(queryset=HardwareType.objects.none(), empty_label="Choose hardware…")
    walltime = forms.CharField(initial="01:00:00", help_text="HH:MM:SS, or 90m, 2h; the session ends then (you are "
                                                             "warned 15 and 5 minutes before)")

    def __init__(self, user, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        default_app()  # a site without apps gets JupyterLab
        choices = session_choices(user)
        self.fields["project"].queryset = choices.projects
        self.fields["software"].queryset = choices.software
        self.fields["hardware"].queryset = choices.hardware
        self.fields["hardware"].label_from_instance = lambda hw: f"{hw.name} — {hw.cluster.name}"
