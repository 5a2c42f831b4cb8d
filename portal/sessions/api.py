"""/api/v1/sessions/: list, start, read, stop; and the report a session's server makes from its node.

Thin, like portal/api/views.py: resolve what the caller may see, call an action, serialise. A start with `hub_env`
is the hub's spawner recording the server it is starting (a hub token: the server's own); any other start asks
the hub to start a named server with those options (the spawner then records it), answered 202.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.authentication import get_authorization_header
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle
from rest_framework.views import APIView

from portal.api import queries
from portal.api.authentication import TokenAuthentication
from portal.api.base import ApiView, ListView
from portal.api.errors import ApiError
from portal.api.models import Scope
from portal.api.parsers import JSONParser, JSONRenderer
from portal.api.schema import BAD_INPUT, COMMON_ERRORS, NOT_FOUND, error
from portal.api.serializers import MoneyField, WalltimeField, absolute_url, money
from portal.budgets.actions import Money
from portal.catalog.queries import budget_after
from portal.hub.authentication import HubCredential
from portal.jobs.actions.cancel import CancelError
from portal.jobs.models import FINAL_STATES
from portal.sessions import actions, hub, tunnels
from portal.sessions.models import Session, SessionApp
from portal.sessions.queries import figures, session_choices, visible_sessions


class SessionSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="job_id", help_text="its job's id: the session is a job of kind session")
    name = serializers.CharField(source="server_name", help_text="its named server on the hub")
    hub_user = serializers.CharField()
    app = serializers.CharField(source="app.slug")
    project = serializers.CharField(source="job.project.slug")
    user = serializers.CharField(source="job.user.username")
    cluster = serializers.CharField(source="job.cluster.slug")
    hardware = serializers.CharField(source="job.hardware.slug", default=None)
    software = serializers.CharField(source="job.software.slug", default=None)
    walltime = WalltimeField(source="job.walltime_seconds")
    state = serializers.CharField(source="job.state")
    state_reason = serializers.CharField(source="job.state_reason")
    scheduler_id = serializers.CharField(source="job.scheduler_id")
    ready = serializers.SerializerMethodField(help_text="its server has reported where it listens")
    server_url = serializers.SerializerMethodField(help_text="where the hub's proxy routes it: on the node, or the "
                                                             "tunnel through the login node (cluster option session_tunnel)")
    connect_url = serializers.SerializerMethodField(help_text="where a person opens it: its server on the hub")
    created_at = serializers.DateTimeField(source="job.created_at")
    started_at = serializers.DateTimeField(source="job.started_at")
    ended_at = serializers.DateTimeField(source="job.ended_at")
    ends_at = serializers.SerializerMethodField()
    seconds_left = serializers.SerializerMethodField()
    estimate = MoneyField(source="job.estimate")
    cost_so_far = serializers.SerializerMethodField()
    budget_left = serializers.SerializerMethodField()
    warning = serializers.SerializerMethodField()
    ended_why = serializers.SerializerMethodField()
    job_url = serializers.SerializerMethodField()

    def _figures(self, session):
        cache = self.context.setdefault("figures", {})
        if session.pk not in cache:
            cache[session.pk] = figures(session)
        return cache[session.pk]

    def get_ready(self, session) -> bool:
        return session.ready_at is not None and session.job.state not in FINAL_STATES

    def get_server_url(self, session) -> str | None:
        return (tunnels.server_url(session) or None) if session.job.state not in FINAL_STATES else None

    def get_connect_url(self, session) -> str:
        return hub.connect_url(session.hub_user, session.server_name)

    def get_ends_at(self, session) -> str | None:
        ends = self._figures(session).ends_at
        return ends.isoformat() if ends else None

    def get_seconds_left(self, session) -> int | None:
        return self._figures(session).seconds_left

    def _money(self, money):
        return None if money is None else {"amount": str(money.amount.quantize(money.amount.__class__("0.01"))),
                                           "unit": money.unit}

    def get_cost_so_far(self, session) -> dict | None:
        return self._money(self._figures(session).cost_so_far)

    def get_budget_left(self, session) -> dict | None:
        return self._money(self._figures(session).budget_left)

    def get_warning(self, session) -> str:
        return self._figures(session).warning

    def get_ended_why(self, session) -> str:
        return self._figures(session).ended_why

    def get_job_url(self, session) -> str:
        return absolute_url(self.context, "job-detail", session.job_id)


class SessionStartSerializer(serializers.Serializer):
    project = serializers.CharField()
    hardware = serializers.CharField()
    software = serializers.CharField()
    walltime = serializers.CharField(default="01:00:00")
    app = serializers.CharField(required=False, allow_blank=True, help_text="a session app's slug (default: the first)")
    name = serializers.CharField(required=False, allow_blank=True, help_text="its named server on the hub")
    hub_env = serializers.DictField(required=False, help_text="the spawner's own: the hub's variables for its server")
    dry_run = serializers.BooleanField(default=False, help_text="check and price it, start nothing")


def _session_or_404(user, pk: int) -> Session:
    session = visible_sessions(user).filter(job_id=pk).first()
    if session is None:
        raise ApiError("not found (or not in a project you can see)", status_code=404, code="not_found")
    return session


def request_from(user, data: dict) -> actions.SessionRequest:
    app = SessionApp.objects.filter(slug=data["app"], enabled=True).first() if data.get("app") else actions.default_app()
    if app is None:
        raise ApiError("no such session app (or none is enabled)", field="app")
    return actions.SessionRequest(
        project=queries.project_or_404(user, data["project"], field="project"), app=app,
        hardware=queries.hardware_or_404(user, data["hardware"]), software=queries.software_or_404(user, data["software"]),
        walltime=data["walltime"], server_name=data.get("name") or f"{app.slug}-{secrets.token_hex(3)}")


class SessionListCreateView(ListView):
    serializer_class = SessionSerializer
    parser_classes = [JSONParser]

    def get_queryset(self):
        sessions = visible_sessions(self.request.user)
        if name := self.request.query_params.get("name"):
            sessions = sessions.filter(server_name=name)
        if self.request.query_params.get("active") in {"1", "true"}:
            sessions = sessions.exclude(job__state__in=FINAL_STATES)
        return sessions

    @extend_schema(responses={200: SessionSerializer(many=True), **COMMON_ERRORS}, summary="Your projects' sessions")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(request=SessionStartSerializer, responses={
        201: SessionSerializer, 202: OpenApiResponse(description="the hub was asked to start it"), **BAD_INPUT,
        402: error("the project's strict budget cannot cover the session (code budget_exceeded)"),
        **COMMON_ERRORS, **NOT_FOUND}, summary="Start a session (JupyterLab on a compute node, through the hub)")
    def post(self, request):
        body = SessionStartSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        req = request_from(request.user, data)
        if "hub_env" in data:
            if not isinstance(request.auth, HubCredential):
                raise ApiError("hub_env comes only from the hub's spawner, with its server's own hub token",
                               status_code=403, code="permission_denied")
            token = get_authorization_header(request).split()[1].decode()
            submission = actions.start_session(request.user, req, hub_user=request.auth.hub_username,
                                               hub_token=token, hub_env=data["hub_env"])
            session = Session.objects.get(job=submission.job)
            code = status.HTTP_201_CREATED if submission.created else status.HTTP_200_OK
            return Response(SessionSerializer(session, context={"request": request}).data, status=code,
                            headers={"Location": reverse("api-session-detail", args=[session.job_id])})
        submission = actions.prepare_session(request.user, req)
        hub_user = hub.hub_user_of(request.user)
        estimate = money(submission.estimate)
        if data["dry_run"]:
            return Response({"name": req.server_name, "script": submission.script, **_priced(req, submission)},
                            status=status.HTTP_200_OK)
        try:
            hub.open_on_hub(hub_user, req.server_name, {
                "project": req.project.slug, "hardware": req.hardware.slug, "software": req.software.slug,
                "walltime": str(req.walltime), "app": req.app.slug})
        except hub.HubRefused as exc:
            raise ApiError(str(exc), status_code=exc.status, code="no_hub" if exc.status == 409 else "hub_refused") from None
        return Response({"name": req.server_name, "hub_user": hub_user,
                         "connect_url": hub.connect_url(hub_user, req.server_name),
                         "estimate": estimate,
                         "detail": "the hub is starting it: it appears in the list in a moment"},
                        status=status.HTTP_202_ACCEPTED)


def _priced(req: actions.SessionRequest, submission) -> dict:
    """A checked session's estimate and its project's budget (what the dry run, the estimate and the spawn page say)."""
    after = budget_after(req.project, submission.estimate)
    return {"estimate": money(submission.estimate),
            "budget_left": money(Money(after.summary.available, after.summary.unit)) if after else None,
            "strict": bool(after and after.summary.strict), "fits": after.fits if after else True}


class EstimateSerializer(serializers.Serializer):
    project = serializers.CharField()
    hardware = serializers.CharField()
    software = serializers.CharField()
    walltime = serializers.CharField(default="01:00:00")
    app = serializers.CharField(required=False, allow_blank=True, help_text="a session app's slug (default: the first)")


class EstimateAnswer(serializers.Serializer):
    estimate = MoneyField(help_text="for the whole walltime; null where the hardware has no price in the budget's unit")
    budget_left = MoneyField(help_text="the project's budget left now; null without a budget")
    strict = serializers.BooleanField(help_text="the budget refuses what it cannot cover")
    fits = serializers.BooleanField(help_text="the budget can cover the estimate (always true for a soft budget)")


class SessionEstimateView(ApiView):
    """The estimate and the budget left for a session, or why it would be refused: the hub's spawn page asks this
    (through the hub's proxy, with a token the hub made for the page) while the person chooses."""

    parser_classes = [JSONParser]
    required_scopes = {"POST": Scope.READ}  # it records nothing

    @extend_schema(request=EstimateSerializer, responses={
        200: EstimateAnswer, **BAD_INPUT,
        402: error("the project's strict budget cannot cover the session (code budget_exceeded)"),
        **COMMON_ERRORS, **NOT_FOUND}, summary="Price a session before starting it (nothing is recorded)")
    def post(self, request):
        body = EstimateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        req = request_from(request.user, {**body.validated_data, "name": "estimate"})
        return Response(_priced(req, actions.prepare_session(request.user, req)))


class HubSessionEstimateView(SessionEstimateView):
    """The same, at /services/<service>/api/v1/sessions/estimate/ on the hub (its proxy keeps the prefix): the spawn
    page's address for it. Not a separate operation of the API's schema."""

    @extend_schema(exclude=True)
    def post(self, request, service: str):
        if service != settings.KAKEHASHI_HUB_SERVICE_NAME:
            raise ApiError("no such JupyterHub service here", status_code=404, code="not_found")
        return super().post(request)


class ChoicesAnswer(serializers.Serializer):
    projects = serializers.ListField(child=serializers.DictField(), help_text="slug, name")
    apps = serializers.ListField(child=serializers.DictField(), help_text="slug, name")
    software = serializers.ListField(child=serializers.DictField(), help_text="slug, name")
    hardware = serializers.ListField(child=serializers.DictField(),
                                     help_text="slug, name, cluster, projects: the slugs of the projects that may use it")


class SessionChoicesView(ApiView):
    """What the caller may start a session with: the portal's New page and the hub's spawn page offer the same."""

    @extend_schema(responses={200: ChoicesAnswer, **COMMON_ERRORS}, summary="What a session may be started with")
    def get(self, request):
        actions.default_app()  # a site without apps gets JupyterLab
        choices = session_choices(request.user)
        slugs = dict(choices.projects.values_list("pk", "slug"))
        return Response({
            "projects": [{"slug": p.slug, "name": p.name} for p in choices.projects],
            "apps": [{"slug": a.slug, "name": a.name} for a in choices.apps],
            "software": [{"slug": s.slug, "name": s.name} for s in choices.software.order_by("name")],
            "hardware": [{"slug": hw.slug, "name": hw.name, "cluster": hw.cluster.name,
                          "projects": sorted(slugs[p] for p in choices.projects_of_hardware.get(hw.pk, ()) if p in slugs)}
                         for hw in choices.hardware.order_by("cluster__name", "name")],
        })


class SessionDetailView(ApiView):
    @extend_schema(responses={200: SessionSerializer, **COMMON_ERRORS, **NOT_FOUND}, summary="A session")
    def get(self, request, pk: int):
        return Response(SessionSerializer(_session_or_404(request.user, pk), context={"request": request}).data)


class SessionStopView(ApiView):
    @extend_schema(request=None, responses={200: SessionSerializer, **COMMON_ERRORS, **NOT_FOUND},
                   summary="Stop a session (or cancel it while it waits)")
    def post(self, request, pk: int):
        session = _session_or_404(request.user, pk)
        try:
            actions.stop_session(request.user, session)
        except CancelError as exc:
            raise ApiError(str(exc), status_code=409, code="already_ended") from None
        session.job.refresh_from_db()
        return Response(SessionSerializer(session, context={"request": request}).data)


class ReportSerializer(serializers.Serializer):
    host = serializers.CharField(max_length=255)
    port = serializers.IntegerField()


class ReportThrottle(AnonRateThrottle):
    rate = "120/min"


class SessionReportView(APIView):
    """POST from a session's node: `Authorization: token <its server's hub token>`, {"host", "port"}. The token is
    recognised by its digest (the hub is not asked: the spawner gave it to this session only)."""

    # Only the portal's own Bearer tokens are authenticated here (an expired or revoked one is 401 as everywhere);
    # the `token` scheme is the server's hub token, read below and never sent to the hub.
    authentication_classes = [TokenAuthentication]
    permission_classes = [AllowAny]
    renderer_classes = [JSONRenderer]
    parser_classes = [JSONParser]
    throttle_classes = [ReportThrottle]

    @extend_schema(request=ReportSerializer, responses={
        204: None, **BAD_INPUT, 401: error("no `Authorization: token …` header, or an expired or revoked portal token"),
        403: error("not a session's token, or taken"), 429: error("too many reports from this address")},
                   summary="A session's server reports where it listens (from its node)")
    def post(self, request):
        parts = get_authorization_header(request).split()
        if len(parts) != 2 or parts[0].lower() != b"token":
            raise ApiError("send Authorization: token <the server's hub token>", status_code=401, code="not_authenticated")
        body = ReportSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            actions.record_address(parts[1].decode("ascii", "replace"), body.validated_data["host"],
                                   body.validated_data["port"])
        except actions.ReportRefused as exc:
            raise ApiError(str(exc), status_code=403, code="report_refused") from None
        return Response(status=status.HTTP_204_NO_CONTENT)
