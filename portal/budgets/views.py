"""The budget page: thin; the rules are in portal.budgets.actions. (Usage pages: portal/usage/views.py.)"""

from __future__ import annotations

from decimal import Decimal

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render

from portal.budgets import actions
from portal.budgets.forms import BudgetForm
from portal.budgets.queries import budget_of, budget_summary
from portal.projects import access


@login_required
def budget(request, slug: str):
    project = get_object_or_404(access.visible_projects(request.user), slug=slug)
    access.require(request.user, project, "manage")
    current = budget_of(project)
    if request.method == "POST":
        form = BudgetForm(request.POST)
        if form.is_valid():
            try:
                actions.set_budget(project, actor=request.user, **form.cleaned_data)
            except ValueError as exc:
                form.add_error("unit", str(exc))
            else:
                messages.success(request, f"The budget of {project.slug} is now {form.cleaned_data['amount']} {form.cleaned_data['unit']}.")
                return redirect("project-detail", slug=project.slug)
    else:
        initial = ({"amount": current.amount.quantize(Decimal("0.01")), "unit": current.unit, "period": current.period,
                    "strict": current.strict} if current else {})
        form = BudgetForm(initial=initial)
    return render(request, "budgets/budget.html", {"project": project, "form": form, "budget": budget_summary(project)})
