"""Sessions: start (recorded and budgeted as a job of kind `session`), the server's report of its address, stop.

Who starts a session is always the hub's spawner (jupyterhub/kakehashi-lab/kakehashi_lab/spawner.py), as the hub
user's portal account, with the variables the hub gives its server; the portal's own Start (page, API, CLI) asks
the hub to start a named server with the chosen options (portal/sessions/hub.py), and the spawner comes back here.
So every session is a server the hub knows and routes, and a job the portal budgets and tracks
(docs/decisions/0049).
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.utils import timezone

from backends.base import Reach
from backends.session import session_payload
from portal.budgets import actions as budgets
from portal.catalog.models import HardwareType, Software
from portal.clusters.connect import reach_of
from portal.crypto import encrypt, token_digest
from portal.jobs import events, locks, transitions
from portal.jobs.actions.cancel import request_cancel
from portal.jobs.actions.submit import Submission, prepare_job, record_jobs
from portal.jobs.actions.validation import BudgetRefused, JobRequest, SubmitError
from portal.jobs.models import FINAL_STATES, Job
from portal.projects.models import Project
from portal.sessions.models import Session, SessionApp
from portal.sessions.report import report_url

# A hub named server's name as Kakehashi gives or accepts it: one URL path segment, a valid job name too.
SERVER_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
# The hub's variables for its server that reach the node: JupyterHub's own and the two the hub's config adds.
_HUB_VARIABLE = re.compile(r"^(JUPYTERHUB_[A-Z0-9_]{1,60}|JPY_API_TOKEN|KAKEHASHI_PORTAL_URL|KAKEHASHI_HUB_SERVICE_NAME)$")
MAX_HUB_VALUE = 4096
_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*$")


@dataclass
class SessionRequest:
    """What a person chooses for a session: the same project, software, hardware and walltime as a job's."""

    project: Project
    app: SessionApp
    hardware: HardwareType | None
    software: Software | None
    walltime: str | int = "01:00:00"
    server_name: str = ""


DEFAULT_APP = {"slug": "jupyterlab", "name": "JupyterLab", "command": "jupyterhub-singleuser", "needs": ["jupyterlab"],
               "description": "JupyterLab on the first node of the allocation, opened through the hub"}


def default_app() -> SessionApp | None:
    """The first enabled app; JupyterLab (migration 0002's) where a site has none at all."""
    if not SessionApp.objects.exists():
        SessionApp.objects.get_or_create(slug=DEFAULT_APP["slug"], defaults=DEFAULT_APP)
    return SessionApp.objects.filter(enabled=True).order_by("pk").first()


def check_server_name(name: str) -> str:
    """A named server's name ("" is the hub's default server of its user)."""
    if name == "":
        return name
    if not isinstance(name, str) or not SERVER_NAME.fullmatch(name):
        raise SubmitError("a session's name is 1–40 lower-case letters, digits and '-', starting with a letter or "
                          "digit (it is part of its address on the hub)", field="server_name")
    return name


def offers_sessions(cluster) -> bool:
    """Clusters reached through a login node or the portal's own host offer sessions; a cloud API (AWS Batch) does
    not: its containers' ports are not reachable from the hub without a load balancer per session (docs/decisions/
    0049)."""
    return reach_of(cluster) is not Reach.CLOUD_API


def _job_request(req: SessionRequest) -> JobRequest:
    if req.hardware is not None and not offers_sessions(req.hardware.cluster):
        raise SubmitError(f"{req.hardware.cluster.name} does not offer interactive sessions (only clusters with a login "
                          "node, and the portal's own host, do): choose hardware on one of those", field="hardware")
    if not req.app.enabled:
        raise SubmitError(f"the session app {req.app.name} is switched off by the site admins", field="app")
    if req.software is None or not req.software.provides_all(req.app.needs or []):
        needs = " and ".join(req.app.needs or []) or "it"
        raise SubmitError(f"{req.app.name} runs inside software that provides {needs}: choose such software "
                          "(Software → provides)", field="software")
    return JobRequest(project=req.project, name=check_server_name(req.server_name) or "session", script=session_payload(req.app.command),
                      hardware=req.hardware, software=req.software, walltime=req.walltime)


def prepare_session(user, req: SessionRequest) -> Submission:
    """Everything checked, the script rendered and the estimate priced, nothing recorded (the form's preview and
    the portal's Start before it asks the hub). A strict budget that cannot cover it refuses here already."""
    prepared = prepare_job(user, _job_request(req), require_account=True)
    prepared.job.kind = Job.Kind.SESSION
    if prepared.estimate is not None:
        try:
            budgets.refuse_unless_it_fits(req.project, 1, prepared.estimate.amount,
                                          getattr(prepared.job, "budget_before", None))
        except budgets.BudgetExceeded as exc:
            raise BudgetRefused(_as_session(str(exc)), field="walltime") from None
    return prepared


def _as_session(words: str) -> str:
    """The budget's refusal, said of a session (its words name a job)."""
    return words.replace("This job needs", "This session needs").replace("to run more jobs", "to run more")


def start_session(user, req: SessionRequest, *, hub_user: str, hub_token: str, hub_env: dict) -> Submission:
    """Record a session the hub's spawner starts: its job (estimate reserved, a strict budget refusing what it
    cannot cover) and its hub side, the hub's variables kept encrypted until the dispatch writes them for the node.
    The same hub server asked for twice is recorded once."""
    env = checked_hub_env(hub_env, hub_token)
    digest = token_digest(hub_token)
    existing = Session.objects.select_related("job").filter(token_digest=digest).first()
    if existing is not None:
        return Submission.recorded(existing.job)
    prepared = prepare_job(user, _job_request(req), require_account=True)
    job = prepared.job
    job.kind = Job.Kind.SESSION
    try:
        with transaction.atomic():
            record_jobs([job], events.submitted(user), dispatch=[job], audit={
                "action": "session.start", "project": job.project,
                "data": {"estimate": str(job.estimate_amount), "server": req.server_name, "app": req.app.slug}})
            Session.objects.create(job=job, app=req.app, hub_user=hub_user, server_name=req.server_name,
                                   hub_env=encrypt(json.dumps({"env": env, "report_url": report_url()})),
                                   token_digest=digest)
    except BudgetRefused as exc:
        raise BudgetRefused(_as_session(exc.message), field=exc.field) from None
    except IntegrityError:
        existing = Session.objects.select_related("job").filter(token_digest=digest).first()
        if existing is None:
            raise
        return Submission.recorded(existing.job)
    return Submission(job, job.rendered_script, prepared.estimate, created=True)


def checked_hub_env(env, token: str) -> dict[str, str]:
    """The hub's variables a server needs, checked: JupyterHub's names only, strings of reasonable size, and the
    server's API token the very one the request came with (a spawner passes its own server's, nobody else's)."""
    if not isinstance(env, dict):
        raise SubmitError("hub_env must be an object of the hub's variables for its server", field="hub_env")
    checked = {}
    for name, value in env.items():
        if not isinstance(name, str) or not _HUB_VARIABLE.fullmatch(name):
            continue  # the hub's other variables (PATH, LANG…) are the node's business, not the hub's
        if not isinstance(value, str) or len(value) > MAX_HUB_VALUE or "\0" in value:
            raise SubmitError(f"hub_env.{name} must be a string of at most {MAX_HUB_VALUE} characters", field="hub_env")
        checked[name] = value
    if checked.get("JUPYTERHUB_API_TOKEN") != token:
        raise SubmitError("hub_env.JUPYTERHUB_API_TOKEN must be the server's own token, the one this request is "
                          "authenticated with", field="hub_env")
    return checked


class ReportRefused(Exception):
    """A report of an address that is not taken (unknown token, a session already reported or ended, bad address)."""


def record_address(token: str, host: str, port) -> Session:
    """A session's server, on its node, says where it listens (authenticated by its hub token, recognised by the
    token's digest). Taken once: a second report, or one for an ended session, is refused, so nobody holding the
    token later can redirect the hub's route. The hub's variables are forgotten: the node has them now."""
    try:
        address = str(ipaddress.ip_address(host)) if not _HOSTNAME.fullmatch(str(host)) else str(host)
    except ValueError:
        raise ReportRefused("host must be an IP address or a host name") from None
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise ReportRefused("port must be a whole number from 1 to 65535")
    with transaction.atomic():
        session = Session.objects.filter(token_digest=token_digest(token)).first()
        if session is None:
            raise ReportRefused("no session has this token")
        job = locks.job(session.job_id)
        session = Session.objects.select_for_update().get(pk=session.pk)
        if session.ready_at is not None or job.state in FINAL_STATES:
            raise ReportRefused("this session's address was reported already, or it has ended")
        session.host, session.port, session.ready_at, session.hub_env = address, port, timezone.now(), ""
        session.save(update_fields=["host", "port", "ready_at", "hub_env"])
        transitions.note(job, events.session_ready(address, port))
    return session


def stop_session(user, session: Session) -> Job:
    """Stop (or cancel while it waits): the job's cancel, with its owner's or admin's cause; the hub notices at
    its next poll and drops the route."""
    return request_cancel(session.job, user)
