"""Site admin → Audit log: who did what from where, filtered by person, action, project, address and time."""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import render

from portal.audit.queries import filtered_entries

PAGE_SIZE = 50


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False, max_length=150, label="Person")
    action = forms.CharField(required=False, max_length=64, label="Action",
                             help_text="An action or its area, e.g. budget, job or auth.login_failed")
    project = forms.SlugField(required=False, label="Project")
    ip = forms.GenericIPAddressField(required=False, label="IP address")
    since = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}))


@login_required
def audit_log(request):
    if not request.user.is_staff:
        raise Http404
    form = AuditFilterForm(request.GET or None)
    filters = form.cleaned_data if form.is_valid() else {}
    page = Paginator(filtered_entries(**filters), PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return render(request, "audit/list.html", {
        "form": form, "page": page, "query": query.urlencode(), "nav": "site",
    }, status=400 if form.is_bound and not form.is_valid() else 200)
