"""Settings → Cluster accounts: link your own cluster account with a key the portal generates; Clusters: how each
cluster your projects use is doing."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from backends.base import Reach
from portal.audit.actions import record
from portal.clusters import actions
from portal.clusters.connect import kinds_reached
from portal.clusters.forms import LinkAccountForm
from portal.clusters.models import Allocation, Cluster, ClusterAccount, IdentityMode
from portal.enqueue import VERIFY_ACCOUNT, enqueue_on_commit
from portal.ids import id_or_zero
from portal.projects import access


def _clusters_for(user):
    projects = access.visible_projects(user)
    ids = Allocation.objects.filter(project__in=projects).values_list("cluster_id", flat=True)
    return Cluster.objects.filter(pk__in=ids, enabled=True, identity_mode=IdentityMode.PER_USER,
                                  kind__in=kinds_reached(Reach.LOGIN_NODE))


@login_required
def cluster_accounts(request):
    rows = []
    accounts = {a.cluster_id: a for a in ClusterAccount.objects.filter(user=request.user)}
    for cluster in _clusters_for(request.user):
        rows.append({"cluster": cluster, "account": accounts.get(cluster.pk), "form": LinkAccountForm(prefix=cluster.slug)})
    return render(request, "clusters/accounts.html", {"rows": rows})


@login_required
@require_POST
def link(request, slug: str):
    cluster = get_object_or_404(_clusters_for(request.user), slug=slug)
    form = LinkAccountForm(request.POST, prefix=cluster.slug)
    if not form.is_valid():
        for error in form.errors.get("username", []):
            messages.error(request, f"{cluster.name}: {error}")
        return redirect("cluster-accounts")
    actions.link_account(cluster, username=form.cleaned_data["username"], user=request.user, actor=request.user)
    messages.success(request, f"A new key for {cluster.name} was created: install its public key, then press Check.")
    return redirect("cluster-accounts")


@login_required
@require_POST
def verify(request, slug: str):
    account = ClusterAccount.objects.filter(user=request.user, cluster__slug=slug).first()
    if account is None:
        raise Http404
    with transaction.atomic():
        ClusterAccount.objects.filter(pk=account.pk).update(last_error="checking…")
        record("cluster_account.verify", actor=request.user, target=account, cluster=slug)
        enqueue_on_commit(VERIFY_ACCOUNT, account.pk)
    messages.info(request, f"Checking the link to {account.cluster.name}…")
    return redirect("cluster-accounts")


@login_required
def account_status(request, slug: str):
    account = ClusterAccount.objects.filter(user=request.user, cluster__slug=slug).select_related("cluster").first()
    if account is None:
        raise Http404
    response = render(request, "clusters/_account_status.html", {"account": account})
    if account.last_error != "checking…" and request.htmx:
        response.status_code = 286
    return response


@login_required
def cluster_health(request):
    """Clusters: reachable or not, the last error, how busy — as the health beat last saw them (never asked here).
    Each person sees the clusters their projects are allocated; site staff see every cluster."""
    clusters = Cluster.objects.filter(enabled=True)
    if not request.user.is_staff:
        projects = access.visible_projects(request.user)
        clusters = clusters.filter(pk__in=Allocation.objects.filter(project__in=projects).values("cluster_id"))
    rows = [(cluster, cluster.known_health) for cluster in clusters.select_related("health").order_by("name")]
    return render(request, "clusters/health.html", {"rows": rows})


@login_required
def project_clusters(request, slug: str):
    """A project's clusters and hardware: what site admins granted, and what the project chose to use of it.
    Owners and admins change the choice; everyone in the project sees it; others get 404."""
    project = get_object_or_404(access.visible_projects(request.user), slug=slug)
    can_manage = access.can(request.user, project, "manage")
    allocations = Allocation.objects.filter(project=project).select_related("cluster").order_by("cluster__name")
    if request.method == "POST":
        allocation = get_object_or_404(allocations, pk=id_or_zero(request.POST.get("allocation")))
        try:
            actions.set_project_usage(request.user, allocation, in_use=request.POST.get("in_use") == "on",
                                      hardware_ids=[int(v) for v in request.POST.getlist("hardware") if v.isdigit()])
        except (ValidationError, PermissionDenied) as exc:
            messages.error(request, exc.messages[0] if isinstance(exc, ValidationError) else str(exc))
        else:
            messages.success(request, f"Saved what {project.slug} uses on {allocation.cluster.name}.")
        return redirect("project-clusters", slug=project.slug)
    rows = []
    for allocation in allocations:
        unused = set(allocation.unused_hardware.values_list("pk", flat=True))
        rows.append({"allocation": allocation,
                     "hardware": [(hw, hw.pk not in unused) for hw in allocation.granted_hardware().order_by("name")]})
    return render(request, "clusters/project_clusters.html", {"project": project, "rows": rows, "can_manage": can_manage})
