"""KakehashiSpawner: a user's (named) server is a Kakehashi session, a job on a compute node, budgeted by the portal.

The spawner never reaches a cluster: it asks the portal's API to start, poll and stop the session, as the hub user's
own portal account (authenticated with the server's own hub token, which the portal checks with the hub). The
portal records the session as a job of kind `session`, a worker submits it, and on the node the job reports its
host and port to the portal; `start` returns that address, and the hub's proxy routes
/user/<name>/<server>/ to it (docs/decisions/0049).

    c.JupyterHub.spawner_class = "kakehashi_lab.spawner.KakehashiSpawner"
    c.KakehashiSpawner.portal_url = "http://portal.internal:8000"   # else $KAKEHASHI_PORTAL_URL
"""

from __future__ import annotations

import asyncio
import html
import json
import os

from jupyterhub.spawner import Spawner
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from traitlets import Float, Integer, Unicode, default

FINAL = {"completed", "failed", "cancelled", "timed_out"}


class SessionRefused(Exception):
    """The portal refused the session (a budget, a choice, an account): the hub's spawn page shows these words."""


class KakehashiSpawner(Spawner):
    portal_url = Unicode(help="the portal's base URL as the hub reaches it (default $KAKEHASHI_PORTAL_URL)").tag(config=True)
    check_seconds = Float(2.0, help="how often start() asks the portal while the session waits").tag(config=True)
    default_project = Unicode("", help="the project preselected on the spawn page").tag(config=True)
    default_hardware = Unicode("", help="hardware slug preselected on the spawn page").tag(config=True)
    default_software = Unicode("", help="software slug preselected on the spawn page").tag(config=True)
    default_walltime = Unicode("01:00:00", help="walltime preselected on the spawn page").tag(config=True)
    session_id = Integer(0, help="the portal's id of the session (its job id); 0 before one is recorded")

    @default("portal_url")
    def _portal_url(self) -> str:
        return os.environ.get("KAKEHASHI_PORTAL_URL", "")

    # A session may wait in the scheduler's queue for hours: the portal's Cancel (or the hub's) ends the wait.
    @default("start_timeout")
    def _start_timeout(self) -> int:
        return 7 * 24 * 3600

    # The server starts after it has reported its address; a busy node takes a while to import JupyterLab. (The hub
    # waits this long for a server stopped in that moment before it forgets it: it does not poll meanwhile.)
    @default("http_timeout")
    def _http_timeout(self) -> int:
        return 90

    @default("poll_interval")
    def _poll_interval(self) -> int:
        return 10

    # ------------------------------------------------------------------------------------------ the spawn page

    @default("options_form")
    def _options_form(self):
        return self._form

    def _form(self, spawner) -> str:
        def field(name: str, label: str, value: str) -> str:
            return (f'<div class="form-group"><label for="kh-{name}">{label}</label>'
                    f'<input class="form-control" id="kh-{name}" name="{name}" value="{html.escape(value)}"></div>')

        return "".join([
            field("project", "Project", self.default_project),
            field("software", "Software (one that provides JupyterLab)", self.default_software),
            field("hardware", "Hardware", self.default_hardware),
            field("walltime", "Walltime", self.default_walltime),
            "<p>Kakehashi shows the estimate and your budget on its Sessions page.</p>",
        ])

    def options_from_form(self, formdata) -> dict:
        return {key: (formdata.get(key) or [""])[0].strip() for key in ("project", "software", "hardware", "walltime")}

    # ----------------------------------------------------------------------------------------------- state

    def get_state(self) -> dict:
        state = super().get_state()
        if self.session_id:
            state["session_id"] = self.session_id
        return state

    def load_state(self, state) -> None:
        super().load_state(state)
        self.session_id = int(state.get("session_id") or 0)

    def clear_state(self) -> None:
        super().clear_state()
        self.session_id = 0

    # ------------------------------------------------------------------------------------------- the portal

    async def _portal(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        if not self.portal_url:
            raise SessionRefused("KakehashiSpawner.portal_url (or $KAKEHASHI_PORTAL_URL) is not set")
        request = HTTPRequest(
            f"{self.portal_url.rstrip('/')}/api/v1/{path}", method=method, request_timeout=60,
            headers={"Authorization": f"token {self.api_token}", "Content-Type": "application/json"},
            body=json.dumps(body) if body is not None else (b"" if method == "POST" else None))
        try:
            answer = await AsyncHTTPClient().fetch(request)
        except HTTPClientError as exc:
            if exc.response is None:
                raise
            try:
                return exc.code, json.loads(exc.response.body or b"{}")
            except ValueError:
                return exc.code, {"detail": exc.response.body[:200].decode(errors="replace")}
        return answer.code, json.loads(answer.body or b"{}")

    # ---------------------------------------------------------------------------------- start, poll, stop

    async def start(self):
        options = dict(self.user_options or {})
        status, answer = await self._portal("POST", "sessions/", {
            "project": options.get("project") or self.default_project,
            "hardware": options.get("hardware") or self.default_hardware,
            "software": options.get("software") or self.default_software,
            "walltime": options.get("walltime") or self.default_walltime,
            "app": options.get("app", ""),
            "name": self.name,
            "hub_env": self.get_env(),
        })
        if status not in (200, 201):
            raise SessionRefused(f"Kakehashi refused the session: {answer.get('detail', status)}")
        self.session_id = int(answer["id"])
        self._status = answer
        while True:
            status, answer = await self._portal("GET", f"sessions/{self.session_id}/")
            if status == 200:
                self._status = answer
                if answer["state"] in FINAL:
                    raise SessionRefused(f"the session ended before it was ready: {answer.get('ended_why') or answer['state']}")
                if answer.get("ready") and answer.get("server_url"):
                    return answer["server_url"]
            await asyncio.sleep(self.check_seconds)

    async def progress(self):
        """What the hub's spawn page shows while the session waits: its state, the scheduler's reason, the portal's
        word on it (expected start where the scheduler says)."""
        seen = None
        while True:
            status = getattr(self, "_status", None)
            if status:
                words = f"Session {status['id']}: {status['state']}"
                if status.get("state_reason"):
                    words += f" ({status['state_reason']})"
                if words != seen:
                    seen = words
                    yield {"progress": {"queued": 10, "submitting": 20, "pending": 40, "running": 80}.get(
                        status["state"], 50), "message": words}
            await asyncio.sleep(1)

    async def poll(self):
        """None while the session's job is active; its end (0) once it has ended or is unknown."""
        if not self.session_id:
            return 0
        if not self.api_token:
            return None  # the hub restarted and holds no token to ask with: assume it runs until its stop
        try:
            status, answer = await self._portal("GET", f"sessions/{self.session_id}/")
        except (OSError, HTTPClientError, SessionRefused) as exc:  # the portal is away: say nothing has ended rather than drop a running session
            self.log.warning("Kakehashi session %s: could not ask the portal: %s", self.session_id, exc)
            return None
        if status == 404:
            return 0
        if status != 200:
            return None
        return 0 if answer["state"] in FINAL else None

    async def stop(self, now: bool = False):
        if not self.session_id:
            return
        status, answer = await self._portal("POST", f"sessions/{self.session_id}/stop/")
        if status not in (200, 409, 404):
            self.log.warning("Kakehashi session %s: the portal answered %s to stop: %s", self.session_id, status,
                             answer.get("detail"))
