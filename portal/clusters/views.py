"""Settings → Cluster accounts: link your own cluster account with a key the portal generates; Clusters: how each
cluster your projects use is doing."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Q
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from backends.base import Reach
from portal.clusters import actions
from portal.clusters.connect import kinds_reached, reach_of
from portal.clusters.forms import LinkAccountForm, OperationsAccountForm
from portal.clusters.models import Allocation, Cluster, ClusterAccount, IdentityMode
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
    actions.request_verification(account, actor=request.user)
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
    # Switched off by the portal itself (a cloud cluster torn down) are shown too, with why: not silently gone.
    clusters = Cluster.objects.filter(Q(enabled=True) | ~Q(disabled_reason=""))
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
    # The project's dataset cache on each cluster (portal/storage/caches.py), for those who manage the project.
    caches = {c.cluster_id: c for c in project.cluster_caches.all()} if can_manage else {}
    for allocation in allocations:
        unused = set(allocation.unused_hardware.values_list("pk", flat=True))
        cache = caches.get(allocation.cluster_id)
        rows.append({"allocation": allocation, "cache": cache, "cache_limit": cache.limit if cache else None,
                     "hardware": [(hw, hw.pk not in unused) for hw in allocation.granted_hardware().order_by("name")]})
    return render(request, "clusters/project_clusters.html", {"project": project, "rows": rows, "can_manage": can_manage})


@staff_member_required
@require_POST
def operations_set_up(request, slug: str):
    """Site page → Health checks → Set up: the site's operations project on this cluster, with its service account
    and a new key where the cluster is reached through one (docs/decisions/0036)."""
    cluster = get_object_or_404(Cluster, slug=slug)
    if not reach_of(cluster).uses_cluster_account:
        actions.set_up_operations(cluster)
        messages.success(request, f"Health checks on {cluster.name} now run in the site's operations project.")
        return redirect("site-admin")
    form = OperationsAccountForm(request.POST, prefix=cluster.slug)
    if not form.is_valid():
        messages.error(request, f"{cluster.name}: " + "; ".join(
            f"{form.fields[name].label}: {error}" for name, errors in form.errors.items() for error in errors))
        return redirect("site-admin")
    try:
        account, new = actions.set_up_service_account(cluster, form.cleaned_data["username"],
                                                      group=form.cleaned_data["group"], actor=request.user)
    except (actions.NotOperations, ValidationError) as exc:
        messages.error(request, f"{cluster.name}: {'; '.join(getattr(exc, 'messages', [str(exc)]))}")
        return redirect("site-admin")
    if new:
        messages.success(request, f"A key for {account.username} on {cluster.name} was created: install its public "
                                  "key on the login node, then press Check the login.")
    return redirect("site-admin")


@staff_member_required
@require_POST
def operations_verify(request, slug: str):
    """Check the operations account's login on the cluster (a worker does it: no web request reaches a cluster)."""
    account = ClusterAccount.objects.filter(cluster__slug=slug, project__operations=True).first()
    if account is None:
        raise Http404
    actions.request_verification(account, actor=request.user)
    messages.info(request, f"Checking {account.username}'s login to {account.cluster.name}…")
    return redirect("site-admin")
