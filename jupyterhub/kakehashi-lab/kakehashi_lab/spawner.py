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
    service_name = Unicode(help="the portal's service name on the hub (default $KAKEHASHI_HUB_SERVICE_NAME, else "
                                "kakehashi)").tag(config=True)
    page_token_seconds = Integer(900, help="how long the spawn page may ask the portal for estimates").tag(config=True)
    session_id = Integer(0, help="the portal's id of the session (its job id); 0 before one is recorded")

    @default("portal_url")
    def _portal_url(self) -> str:
        return os.environ.get("KAKEHASHI_PORTAL_URL", "")

    @default("service_name")
    def _service_name(self) -> str:
        return os.environ.get("KAKEHASHI_HUB_SERVICE_NAME", "kakehashi")

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

    async def _form(self, spawner) -> str:
        """The spawn page: the person's own projects, software and hardware, asked of the portal with a token the hub
        makes for this page (short-lived, for the portal's service only), and the estimate and budget left, which the
        page asks the portal for through the hub's proxy while the person chooses (docs/decisions/0057)."""
        token = self.user.new_api_token(note="Kakehashi spawn page: choices and estimates",
                                        expires_in=self.page_token_seconds,
                                        scopes=[f"access:services!service={self.service_name}"])
        try:
            status, choices = await self._portal("GET", "sessions/choices/", token=token)
        except (OSError, HTTPClientError, SessionRefused) as exc:
            status, choices = 0, {"detail": str(exc)}
        if status != 200:
            return self._plain_form(f"Kakehashi could not be asked for your choices ({choices.get('detail', status)}): "
                                    "type them as Kakehashi names them (slugs), or start the session on its Sessions "
                                    "page, which shows the estimate and your budget.")
        return self._chosen_form(choices, token)

    def _plain_form(self, why: str) -> str:
        fields = [self._field(name, label, value) for name, label, value in (
            ("project", "Project", self.default_project),
            ("software", "Software (one that provides JupyterLab)", self.default_software),
            ("hardware", "Hardware", self.default_hardware),
            ("walltime", "Walltime", self.default_walltime))]
        return "".join(fields) + f'<p class="alert alert-warning" role="status">{html.escape(why)}</p>'

    @staticmethod
    def _field(name: str, label: str, value: str) -> str:
        return (f'<div class="form-group"><label for="kh-{name}">{label}</label>'
                f'<input class="form-control" id="kh-{name}" name="{name}" value="{html.escape(value)}"></div>')

    @staticmethod
    def _select(name: str, label: str, options: list[tuple[str, str, str]], chosen: str, empty: str = "") -> str:
        """options: (value, label, the projects that may use it, space-separated; "" for all)."""
        rows = [f'<option value="">{html.escape(empty)}</option>'] if empty else []
        for value, text, projects in options:
            rows.append(f'<option value="{html.escape(value)}"'
                        + (f' data-projects="{html.escape(projects)}"' if projects else "")
                        + (" selected" if value == chosen else "") + f">{html.escape(text)}</option>")
        return (f'<div class="form-group"><label for="kh-{name}">{label}</label>'
                f'<select class="form-control" id="kh-{name}" name="{name}">{"".join(rows)}</select></div>')

    def _chosen_form(self, choices: dict, token: str) -> str:
        base = self.hub.base_url.removesuffix("hub/") if self.hub else "/"
        estimate_url = f"{base}services/{self.service_name}/api/v1/sessions/estimate/"
        parts = [
            self._select("project", "Project", [(p["slug"], p["name"], "") for p in choices["projects"]],
                         self.default_project),
            self._select("software", "Software (one that provides JupyterLab)",
                         [(s["slug"], s["name"], "") for s in choices["software"]], self.default_software,
                         "Choose software…"),
            self._select("hardware", "Hardware", [(h["slug"], f"{h['name']} — {h['cluster']}", " ".join(h["projects"]))
                                                  for h in choices["hardware"]], self.default_hardware,
                         "Choose hardware…"),
            self._field("walltime", "Walltime (HH:MM:SS, or 90m, 2h)", self.default_walltime),
        ]
        if len(choices["apps"]) > 1:
            parts.insert(1, self._select("app", "App", [(a["slug"], a["name"], "") for a in choices["apps"]], ""))
        config = json.dumps({"url": estimate_url, "token": token}).replace("<", "\\u003c")
        parts.append('<div id="kh-estimate" class="alert alert-secondary" role="status" aria-live="polite">'
                     'Choose software, hardware and walltime: the estimate and your project\'s budget show here '
                     'before you start.</div>')
        parts.append(f'<script type="application/json" id="kh-config">{config}</script><script>{_ESTIMATE_SCRIPT}</script>')
        return "".join(parts)

    def options_from_form(self, formdata) -> dict:
        return {key: (formdata.get(key) or [""])[0].strip()
                for key in ("project", "software", "hardware", "walltime", "app")}

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

    async def _portal(self, method: str, path: str, body: dict | None = None, token: str = "") -> tuple[int, dict]:
        if not self.portal_url:
            raise SessionRefused("KakehashiSpawner.portal_url (or $KAKEHASHI_PORTAL_URL) is not set")
        request = HTTPRequest(
            f"{self.portal_url.rstrip('/')}/api/v1/{path}", method=method, request_timeout=60,
            headers={"Authorization": f"token {token or self.api_token}", "Content-Type": "application/json"},
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


# The spawn page's estimate: what the portal's own dry run says (its words for a refusal too), asked again after each
# change; only hardware the chosen project may use is offered.
_ESTIMATE_SCRIPT = """
(function () {
  const config = JSON.parse(document.getElementById("kh-config").textContent);
  const out = document.getElementById("kh-estimate");
  const field = (name) => document.getElementById("kh-" + name);
  let asked = 0, timer = null;
  function offerTheProjectsHardware() {
    const hardware = field("hardware"), project = field("project").value;
    for (const option of hardware.options) {
      if (!option.dataset.projects) continue;
      const usable = option.dataset.projects.split(" ").includes(project);
      option.hidden = option.disabled = !usable;
    }
    if (hardware.selectedOptions.length && hardware.selectedOptions[0].disabled) hardware.value = "";
  }
  function say(words, tone) {
    out.className = "alert alert-" + tone;
    out.textContent = words;
  }
  async function price() {
    offerTheProjectsHardware();
    const body = {project: field("project").value, software: field("software").value,
                  hardware: field("hardware").value, walltime: field("walltime").value};
    if (field("app")) body.app = field("app").value;
    if (!body.software || !body.hardware) {
      say("Choose software, hardware and walltime: the estimate and your project's budget show here before you start.", "secondary");
      return;
    }
    const mine = ++asked;
    let answer, status;
    try {
      const response = await fetch(config.url, {method: "POST", body: JSON.stringify(body),
        headers: {"Authorization": "token " + config.token, "Content-Type": "application/json"}});
      status = response.status;
      answer = await response.json();
    } catch (error) {
      if (mine === asked) say("Kakehashi could not be asked for the estimate (" + error + "); Start still checks it.", "warning");
      return;
    }
    if (mine !== asked) return;  // a later change is being priced
    if (status !== 200) {
      say(answer.detail || ("Kakehashi answered " + status), "danger");
      return;
    }
    let words = answer.estimate ? "Estimate: " + answer.estimate.text + " for the whole walltime."
                                : "This hardware has no price in your budget's unit.";
    if (answer.budget_left) {
      words += " Budget left: " + answer.budget_left.text + (answer.strict ? " (strict)." : ".");
    }
    say(words, answer.fits ? "info" : "danger");
  }
  const later = () => { clearTimeout(timer); timer = setTimeout(price, 300); };
  for (const name of ["project", "app", "software", "hardware", "walltime"]) {
    const input = field(name);
    if (input) { input.addEventListener("change", later); input.addEventListener("input", later); }
  }
  price();
})();
"""
