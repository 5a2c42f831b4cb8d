"""The bell's list and Settings → Notifications. Thin: read, mark read, save the preference."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.notifications import actions
from portal.notifications.models import Notification, Preference

SHOWN = 50


class PreferenceForm(forms.ModelForm):
    class Meta:
        model = Preference
        fields = list(Preference.CHOICES)
        widgets = {name: forms.CheckboxInput(attrs={"class": "form-check-input"}) for name in fields}


@login_required
def notification_list(request):
    """Newest first, SHOWN a page; `?before=<id>` is the next page (keyset, as the job list: no count, no offset).
    The rows link to their job or sweep by id alone (neither is read), to a project by its slug."""
    before = request.GET.get("before", "")
    rows = Notification.objects.filter(user=request.user).select_related("project").order_by("-pk")
    if before.isdigit():
        rows = rows.filter(pk__lt=int(before))
    rows = list(rows[: SHOWN + 1])
    older = rows[SHOWN - 1].pk if len(rows) > SHOWN else None
    for row in rows:
        row.link = actions.link_of(row)
    return render(request, "notifications/list.html", {"rows": rows[:SHOWN], "older": older,
                                                       "newest": before.isdigit()})


@login_required
@require_POST
def mark_read(request):
    ids = [int(v) for v in request.POST.getlist("id") if v.isdigit()] or None
    count = actions.mark_read(request.user, ids)
    messages.success(request, f"{count} notification(s) marked read.")
    return redirect("notifications")


@login_required
def preferences(request):
    form = PreferenceForm(request.POST or None, instance=actions.preference_of(request.user))
    if request.method == "POST" and form.is_valid():
        actions.save_preference(request.user, **form.cleaned_data)
        messages.success(request, "Saved: this is how you will hear about your jobs.")
        return redirect("notification-preferences")
    return render(request, "notifications/preferences.html", {"form": form, "section": "notifications",
                                                              "has_email": bool(request.user.email)})
