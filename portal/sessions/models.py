"""Interactive sessions: JupyterLab on a compute node, opened through the hub (docs/decisions/0049).

A session is a Job of kind `session` (the same lifecycle, budget, tracking, cancel and events); this app keeps only
what a job does not have: the admin-defined app it runs, the hub's named server it is, and where it listens.
"""

from __future__ import annotations

import json
import shlex

from django.db import models

from backends.session import CONFIG_FILE, LAUNCHER, LAUNCHER_FILE
from portal.crypto import decrypt


class SessionApp(models.Model):
    """What a session runs, as a site admin defines it (Open OnDemand's "interactive app"): a command started on
    the allocation's first node with `--ip` and `--port` added, inside software that provides `needs`."""

    slug = models.SlugField(unique=True, max_length=50)
    name = models.CharField(max_length=100)
    command = models.CharField(max_length=500, default="jupyterhub-singleuser",
                               help_text="run as given (no shell), with --ip=… --port=… added; the hub's variables "
                                         "in its environment")
    needs = models.JSONField(default=list, blank=True,
                             help_text='what the chosen software must provide (Software → provides), e.g. ["jupyterlab"]')
    description = models.TextField(blank=True)
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Session(models.Model):
    """The session side of a Job of kind `session`."""

    job = models.OneToOneField("jobs.Job", primary_key=True, on_delete=models.CASCADE, related_name="session")
    app = models.ForeignKey(SessionApp, on_delete=models.PROTECT, related_name="sessions")
    # The hub's named server this session is: /user/<hub_user>/<server_name>/ on the hub.
    hub_user = models.CharField(max_length=255)
    server_name = models.CharField(max_length=63)
    # The hub's variables for its server (JUPYTERHUB_*: its API token among them), encrypted, until the job is
    # handed to the scheduler; emptied once the server has reported (the node then holds the only copy).
    hub_env = models.TextField(blank=True)
    # SHA-256 of that API token: the server's report of its address is recognised by it (never the token itself).
    token_digest = models.CharField(max_length=64, db_index=True)
    host = models.CharField(max_length=255, blank=True)
    port = models.PositiveIntegerField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-job_id"]

    def __str__(self) -> str:
        return f"session {self.hub_user}/{self.server_name} (job {self.job_id})"

    @property
    def url(self) -> str:
        """Where the server listens on its node (empty until it has reported): the hub's route, unless the cluster's
        sessions go through a tunnel (portal/sessions/tunnels.py `server_url`)."""
        return f"http://{self.host}:{self.port}" if self.ready_at and self.host and self.port else ""

    def launch_files(self) -> dict[str, bytes]:
        """The files its job directory gets beside the payload (portal/jobs/specs.py asks, at dispatch): the
        launcher, and session.json with the hub's variables (mode 0600 from the staging archive)."""
        files = {LAUNCHER_FILE: LAUNCHER.encode()}
        if self.hub_env:
            # {"env": the hub's variables, "report_url": where to report}, as start_session recorded them.
            config = {**json.loads(decrypt(self.hub_env)), "command": shlex.split(self.app.command)}
            files[CONFIG_FILE] = json.dumps(config).encode()
        return files


class SessionTunnel(models.Model):
    """The SSH tunnel a session on a cluster with the option `session_tunnel` is reached through: a port on the
    tunnel process's host (`manage.py session_tunnels`) carried through the login node to where the session's server
    reported it listens (docs/decisions/0056). Kept while the session runs, so a restarted tunnel process listens on
    the same port again: the hub's proxy keeps its route."""

    session = models.OneToOneField(Session, primary_key=True, on_delete=models.CASCADE, related_name="tunnel")
    port = models.PositiveIntegerField(help_text="where the tunnel listens on the tunnel process's host")
    opened_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)
    connections = models.PositiveIntegerField(default=0, help_text="connections carried so far")
    problem = models.CharField(max_length=500, blank=True, help_text="why the last connection could not be carried")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["port"], condition=models.Q(closed_at__isnull=True),
                                               name="one_open_tunnel_per_port")]

    def __str__(self) -> str:
        return f"tunnel :{self.port} of session {self.session_id}"


class TunnelHeartbeat(models.Model):
    """The tunnel process as last seen (one row a site): which one holds the site's tunnels and when it last
    reconciled. Written by the process every reconciliation; read by the pages that say whether sessions on clusters
    with `session_tunnel` can be reached (portal/sessions/tunnels.py `tunnel_warning`), and by a second process that
    refuses to start, to say which one runs (docs/decisions/0056)."""

    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    interval = models.FloatField(help_text="seconds between two of its reconciliations")
    seen_at = models.DateTimeField(help_text="when its last reconciliation began")

    def __str__(self) -> str:
        return f"session_tunnels pid {self.pid} on {self.host}, seen {self.seen_at:%Y-%m-%d %H:%M:%S}"
