"""The project's idle rule as its admins edit it: minutes and hours for people, seconds in the model."""

from __future__ import annotations

from django import forms

from portal.samples.models import IdleRule

MAX_MINUTES = 100_000  # about 69 days: longer than any walltime, and seconds of it fit the model's integers


def _numbers(text: str, what: str) -> list[float]:
    try:
        return [float(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise forms.ValidationError(f"{what}: numbers separated by commas") from None


def _names(text: str) -> list[str]:
    return sorted({part.strip() for part in text.split(",") if part.strip()})


class IdleRuleForm(forms.Form):
    threshold_percent = forms.FloatField(label="Threshold (%)", min_value=0.1, max_value=100,
                                         help_text="a GPU below this utilisation in every sample is idle")
    window_minutes = forms.FloatField(label="Window (minutes)", min_value=0.01, max_value=MAX_MINUTES,
                                      help_text="every GPU idle for this long: the job is idle")
    warn_at_minutes = forms.CharField(label="Warn the owner at (minutes of idleness)", required=False,
                                      help_text="e.g. 60, 105")
    action = forms.ChoiceField(label="Then", choices=IdleRule.Action.choices)
    cancel_after_minutes = forms.FloatField(label="Cancel after (minutes of idleness)", min_value=0.01,
                                            max_value=MAX_MINUTES)
    keep_max_hours = forms.IntegerField(label="Longest keep (hours)", min_value=1, max_value=10_000)
    exempt_busy_gpus = forms.IntegerField(label="A job with this many busy GPUs is busy", min_value=1, initial=1,
                                          max_value=10_000)
    exempt_users = forms.CharField(label="Exempt users", required=False, help_text="usernames, comma-separated")
    exempt_hardware = forms.CharField(label="Exempt hardware", required=False, help_text="hardware slugs")
    exempt_sessions_under_hours = forms.FloatField(label="Exempt interactive sessions under (hours)", min_value=0,
                                                   initial=0, required=False, max_value=10_000)

    def clean_warn_at_minutes(self) -> list[int]:
        minutes = _numbers(self.cleaned_data["warn_at_minutes"], "warnings")
        if not all(0 < m <= MAX_MINUTES for m in minutes):  # also NaN and infinities
            raise forms.ValidationError(f"each warning is above 0 and at most {MAX_MINUTES:,} minutes")
        return sorted({round(m * 60) for m in minutes})

    def as_rule_fields(self) -> dict:
        data = self.cleaned_data
        return {"threshold_percent": data["threshold_percent"], "window_seconds": round(data["window_minutes"] * 60),
                "warn_at_seconds": data["warn_at_minutes"], "action": data["action"],
                "cancel_after_seconds": round(data["cancel_after_minutes"] * 60),
                "keep_max_hours": data["keep_max_hours"], "exempt_busy_gpus": data["exempt_busy_gpus"],
                "exempt_users": _names(data["exempt_users"]), "exempt_hardware": _names(data["exempt_hardware"]),
                "exempt_sessions_under_hours": data["exempt_sessions_under_hours"] or 0.0}

    @staticmethod
    def initial_of(rule) -> dict:
        return {"threshold_percent": rule.threshold_percent, "window_minutes": rule.window_seconds / 60,
                "warn_at_minutes": ", ".join(f"{w / 60:g}" for w in rule.warn_at_seconds), "action": rule.action,
                "cancel_after_minutes": rule.cancel_after_seconds / 60, "keep_max_hours": rule.keep_max_hours,
                "exempt_busy_gpus": rule.exempt_busy_gpus, "exempt_users": ", ".join(sorted(rule.exempt_users)),
                "exempt_hardware": ", ".join(sorted(rule.exempt_hardware)),
                "exempt_sessions_under_hours": rule.exempt_sessions_under_hours}
