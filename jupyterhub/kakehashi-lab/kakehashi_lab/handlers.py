"""The handlers on the user's own Jupyter server, under <base_url>kakehashi/. Lab's login and XSRF protection apply
(APIHandler + authenticated); notebooks are read and written through the server's contents manager, so they are
the files the user sees in Lab.

  GET  kakehashi/projects                  the user's projects in the portal
  GET  kakehashi/choices?project=SLUG      software, hardware and presets that project may use
  GET  kakehashi/parameters?path=NB        the notebook's parameters cell (names and values as written)
  POST kakehashi/jobs                      submit the saved notebook (or a dry run: estimate and budget left)
  GET  kakehashi/jobs/ID                   the job's state, its page (through the hub) and whether its result is back
  POST kakehashi/jobs/ID/executed          save the executed notebook next to the original, e.g. nb.kakehashi-ID.ipynb
"""

from __future__ import annotations

import asyncio
import json
import os
from posixpath import dirname

from jupyter_core.utils import ensure_async
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web

from kakehashi_lab import beside
from kakehashi_lab.notebooks import ParameterError, executed_path, job_name_for, parameters_of, parse_parameters
from kakehashi_lab.portal import KakehashiPortal, PortalError

EXECUTED_OUTPUT = "notebook.ipynb"  # the portal's name for the executed notebook among a job's outputs
FINAL_STATES = {"completed", "failed", "cancelled", "timed_out"}


class KakehashiHandler(APIHandler):
    auth_resource = "contents"  # reads and writes the user's notebooks

    @property
    def portal(self) -> KakehashiPortal:
        return self.settings["kakehashi_portal"]

    def answer(self, data, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))

    def refuse(self, error: PortalError) -> None:
        self.answer(error.as_json(), error.status)

    def body(self) -> dict:
        try:
            data = json.loads(self.request.body or b"{}")
        except ValueError:
            raise PortalError(400, "the request body is not JSON", "invalid") from None
        if not isinstance(data, dict):
            raise PortalError(400, "the request body must be a JSON object", "invalid")
        return data

    async def notebook(self, path: str) -> dict:
        if not isinstance(path, str) or not path.endswith(".ipynb"):
            raise PortalError(400, "choose a notebook (.ipynb) to submit", "invalid", "path")
        try:
            model = await ensure_async(self.contents_manager.get(path, content=True, type="notebook"))
        except web.HTTPError as exc:
            raise PortalError(exc.status_code if exc.status_code < 500 else 400,
                              f"cannot read {path}: {exc.log_message or exc.reason}", "invalid", "path") from None
        return json.loads(json.dumps(model["content"]))  # a plain dict, as the portal receives it


class ProjectsHandler(KakehashiHandler):
    @web.authenticated
    @authorized
    async def get(self):
        try:
            page = await self.portal.call("GET", "projects/", params={"limit": 500})
        except PortalError as exc:
            return self.refuse(exc)
        self.answer({"projects": page["results"]})


class ChoicesHandler(KakehashiHandler):
    @web.authenticated
    @authorized
    async def get(self):
        project = {"project": self.get_argument("project", "")}
        try:
            software, hardware, presets = await asyncio.gather(
                self.portal.call("GET", "software/", params={**project, "limit": 500}),
                self.portal.call("GET", "hardware/", params={**project, "limit": 500}),
                self.portal.call("GET", "presets/", params=project),
            )
        except PortalError as exc:
            return self.refuse(exc)
        self.answer({"software": software["results"], "hardware": hardware["results"], "presets": presets})


class ParametersHandler(KakehashiHandler):
    @web.authenticated
    @authorized
    async def get(self):
        path = self.get_argument("path", "")
        try:
            notebook = await self.notebook(path)
            files, cut = await beside.listing(self.contents_manager, path)
        except PortalError as exc:
            return self.refuse(exc)
        self.answer({
            "path": path,
            "name": job_name_for(path),
            "parameters": [{"name": p.name, "default": p.default} for p in parameters_of(notebook)],
            # What may travel with it (the dialog offers them, within the limits it shows).
            "beside": files,
            "beside_cut": cut,
            "limits": {"files": beside.MAX_FILES, "bytes": beside.MAX_BYTES},
        })


class SubmitHandler(KakehashiHandler):
    @web.authenticated
    @authorized
    async def post(self):
        """Reads the saved notebook, turns the typed parameters into values, and posts both to the portal."""
        try:
            data = self.body()
            path = data.get("path", "")
            notebook = await self.notebook(path)
            try:
                parameters = parse_parameters(data.get("parameters") or {}, notebook)
            except ParameterError as exc:
                raise PortalError(400, str(exc), "invalid", f"parameters.{exc.name}") from None
            try:
                files = await beside.read(self.contents_manager, path, data.get("files") or [])
            except beside.BesideError as exc:
                raise PortalError(400, str(exc), "invalid", "files") from None
            except web.HTTPError as exc:
                raise PortalError(400, f"cannot read a file beside the notebook: {exc.log_message or exc.reason}",
                                  "invalid", "files") from None
            if files:  # the portal writes them next to the notebook in the job's directory
                notebook.setdefault("metadata", {}).setdefault("kakehashi", {})["files"] = files
            job = {
                "project": data.get("project"),
                "name": data.get("name") or job_name_for(path),
                "hardware": data.get("hardware"),
                "software": data.get("software") or None,
                "nodes": data.get("nodes") or 1,
                "walltime": data.get("walltime") or "01:00:00",
                "notebook": notebook,
                "parameters": parameters,
                "dry_run": bool(data.get("dry_run")),
            }
            key = self.request.headers.get("Idempotency-Key")  # one per dialog: a repeated click is the same job
            answer = await self.portal.call("POST", "jobs/", body=job,
                                            headers={"Idempotency-Key": key} if key and not job["dry_run"] else None)
        except PortalError as exc:
            return self.refuse(exc)
        self.answer({
            "dry_run": job["dry_run"],
            "id": answer.get("id"),
            "state": answer.get("state"),
            "estimate": answer.get("estimate"),
            "budget": answer.get("budget"),
            "warnings": answer.get("warnings") or [],
            "parameters": parameters,
            "files": sorted(files),
            "link": self.portal.page_link(answer.get("url")),
        }, 200 if job["dry_run"] else 201)


class JobHandler(KakehashiHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str):
        try:
            job = await self.portal.call("GET", f"jobs/{int(job_id)}/")
        except PortalError as exc:
            return self.refuse(exc)
        executed = next((o for o in job.get("outputs", []) if o.get("path") == EXECUTED_OUTPUT and o.get("url")), None)
        self.answer({
            "id": job["id"],
            "name": job["name"],
            "state": job["state"],
            "state_reason": job.get("state_reason", ""),
            "ended": job["state"] in FINAL_STATES,
            "link": self.portal.page_link(job.get("url")),
            "executed": executed is not None,
        })


class ExecutedHandler(KakehashiHandler):
    @web.authenticated
    @authorized
    async def post(self, job_id: str):
        """Downloads the executed notebook and saves it beside the notebook it came from."""
        try:
            path = self.body().get("path", "")
            if not isinstance(path, str) or not path.endswith(".ipynb"):
                raise PortalError(400, "say which notebook the job was submitted from", "invalid", "path")
            job = await self.portal.call("GET", f"jobs/{int(job_id)}/")
            executed = next((o for o in job.get("outputs", []) if o.get("path") == EXECUTED_OUTPUT and o.get("url")), None)
            if executed is None:
                raise PortalError(409, f"job {job['id']} has no executed notebook in the portal (yet)", "not_ready")
            content = await self.portal.call("GET", executed["url"], raw=True)
            try:
                notebook = json.loads(content)
            except ValueError:
                raise PortalError(502, "the executed notebook the portal sent is not JSON", "portal_error") from None
            target = executed_path(path, job["id"])
            await ensure_async(self.contents_manager.save({"type": "notebook", "format": "json", "content": notebook},
                                                          target))
        except PortalError as exc:
            return self.refuse(exc)
        self.answer({"path": target, "directory": dirname(target)}, 201)


class SessionHandler(KakehashiHandler):
    """This server's own Kakehashi session, if it is one (KakehashiSpawner on the hub): what Lab's status bar shows
    (time left, cost so far, budget left, the walltime warnings). 404 where this server is not a session."""

    auth_resource = "status"
    # The status bar asks every 30 s while a tab is open: that is not a person using the session, and the idle rule
    # reads the server's activity (docs/decisions/0055), as jupyter_server's own /api/status does not count.
    _track_activity = False

    @web.authenticated
    @authorized
    async def get(self):
        name = os.environ.get("JUPYTERHUB_SERVER_NAME")
        if name is None or "KAKEHASHI_SESSION" not in os.environ:
            return self.answer({"detail": "this Jupyter server is not a Kakehashi session", "code": "not_a_session"},
                               404)
        try:
            page = await self.portal.call("GET", "sessions/", params={"name": name, "active": "1"})
        except PortalError as exc:
            return self.refuse(exc)
        sessions = page.get("results", []) if isinstance(page, dict) else []
        if not sessions:
            return self.answer({"detail": "the portal knows no running session of this server", "code": "not_found"},
                               404)
        keys = ("id", "name", "state", "seconds_left", "ends_at", "cost_so_far", "budget_left", "warning", "ended_why")
        session = {key: sessions[0].get(key) for key in keys}
        session["link"] = self.portal.page_link(sessions[0].get("job_url"))
        self.answer(session)


def setup_handlers(server_app) -> None:
    web_app = server_app.web_app
    web_app.settings["kakehashi_portal"] = KakehashiPortal(config=server_app.config)
    base = url_path_join(web_app.settings["base_url"], "kakehashi")
    web_app.add_handlers(".*$", [
        (url_path_join(base, "projects"), ProjectsHandler),
        (url_path_join(base, "choices"), ChoicesHandler),
        (url_path_join(base, "parameters"), ParametersHandler),
        (url_path_join(base, "jobs"), SubmitHandler),
        (url_path_join(base, r"jobs/(\d+)"), JobHandler),
        (url_path_join(base, r"jobs/(\d+)/executed"), ExecutedHandler),
        (url_path_join(base, "session"), SessionHandler),
    ])

