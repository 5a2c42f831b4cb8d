"""Session pages: the list (state, expected start, Connect, Stop or Cancel), New (estimate and budget left before
Start). Thin: the form, then portal/sessions/actions.py and hub.py; nothing here reaches a cluster."""

from __future__ import annotations

import secrets

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from portal.catalog.queries import budget_after
from portal.jobs.actions.cancel import CancelError, may_cancel
from portal.jobs.actions.validation import SubmitError
from portal.jobs.models import FINAL_STATES
from portal.sessions import actions, hub
from portal.sessions.forms import SessionForm
from portal.sessions.queries import figures, visible_sessions
from portal.sessions.tunnels import tunnel_warnings


@login_required
def session_list(request):
    sessions = list(visible_sessions(request.user)[:100])
    for session in sessions:
        session.figures = figures(session)
        session.connect_url = hub.connect_url(session.hub_user, session.server_name)
        session.active = session.job.state not in FINAL_STATES
        session.may_stop = session.active and may_cancel(request.user, session.job)
    # Just started: the hub's spawner records it a moment later; the page keeps asking until it is there.
    starting = request.GET.get("starting", "")
    starting = starting if actions.SERVER_NAME.fullmatch(starting) and not any(
        s.server_name == starting for s in sessions) else ""
    # A cluster reached through tunnels while the tunnel process does not run: its sessions cannot be connected to.
    clusters = {s.job.cluster_id: s.job.cluster for s in sessions if s.active}
    warnings = tunnel_warnings(clusters.values())
    template = "sessions/_live.html" if request.GET.get("part") == "table" else "sessions/list.html"
    return render(request, template, {"sessions": sessions, "nav": "sessions", "starting": starting,
                                      "any_active": bool(starting) or any(s.active for s in sessions),
                                      "tunnel_warnings": [(clusters[pk], text) for pk, text in warnings.items()]})


@login_required
def session_new(request):
    preview, part = None, request.GET.get("part")
    form = SessionForm(request.user, request.POST or None, initial={"project": request.GET.get("project")})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        req = actions.SessionRequest(project=data["project"], app=data["app"], hardware=data["hardware"],
                                     software=data["software"], walltime=data["walltime"],
                                     server_name=f"{data['app'].slug}-{secrets.token_hex(3)}")
        try:
            prepared = actions.prepare_session(request.user, req)
            if "start" in request.POST and part != "estimate":
                hub.open_on_hub(hub.hub_user_of(request.user), req.server_name, {
                    "project": req.project.slug, "hardware": req.hardware.slug, "software": req.software.slug,
                    "walltime": str(req.walltime), "app": req.app.slug})
                messages.success(request, f"You started session {req.server_name} on {req.hardware.cluster.name}. "
                                          "Its state below follows the scheduler live; Connect appears once it runs.")
                return redirect(f"{reverse('session-list')}?starting={req.server_name}")
            preview = {"estimate": prepared.estimate, "budget": budget_after(req.project, prepared.estimate),
                       "script": prepared.script}
        except SubmitError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        except PermissionDenied as exc:
            form.add_error("project", str(exc))
        except hub.HubRefused as exc:
            form.add_error(None, str(exc))
    if part == "estimate":
        errors = [e for errors in form.errors.values() for e in errors] if request.method == "POST" else []
        if any(not form[name].value() for name in ("software", "hardware")):
            errors = []  # a form half filled in: nothing to say yet
        return render(request, "sessions/_estimate.html", {"preview": preview, "errors": errors})
    return render(request, "sessions/new.html", {"form": form, "preview": preview, "nav": "sessions"})


@login_required
@require_POST
def session_stop(request, pk: int):
    session = get_object_or_404(visible_sessions(request.user), job_id=pk)
    try:
        actions.stop_session(request.user, session)
    except CancelError as exc:
        messages.info(request, str(exc))
    except PermissionDenied as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"You asked to stop session {session.server_name}. Its state below follows the "
                                  "scheduler live.")
    return redirect("session-list")
