"""The tunnel process's loop: every second, the tunnels the database wants against those this process holds
(portal/sessions/tunnels.py says which to open and close), each one a backend's `forward` (backends/forward.py: an
SSH direct-tcpip channel through the login node per connection, as the session's cluster account, host keys
pinned). Run by `manage.py session_tunnels`; why a process of its own and not a Celery task: docs/decisions/0056.

What survives what:
- a crash or restart of this process: the tunnels' ports are recorded; the next process listens on the same ports
  again within a second of starting, so the hub's routes (set once, when the session started) lead somewhere again;
- the database away: nothing held is closed (a session is only closed once the database says it ended);
- the login node's connection dropped: the next connection carried opens it again (the transport's pool).
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass

from django.conf import settings
from django.utils import timezone

from backends.base import BackendError
from backends.forward import Forward
from portal.clusters.connect import NoClusterAccount, account_for, backend_for
from portal.clusters.models import Cluster
from portal.jobs.models import FINAL_STATES
from portal.sessions.models import Session, SessionTunnel, TunnelHeartbeat
from portal.sessions.tunnels import OPTION, Target, candidate_ports, check_option, plan, port_range, wants_tunnel

log = logging.getLogger("kakehashi.tunnels")
HEARTBEAT = 1  # the one TunnelHeartbeat row's key


def wanted_targets() -> dict[int, Target]:
    """Every session that must be reachable through a tunnel now: on a cluster with the option, its server's address
    reported, its job not ended."""
    sessions = (Session.objects.filter(ready_at__isnull=False, port__isnull=False, **{f"job__cluster__options__{OPTION}": True})
                .exclude(host="").exclude(job__state__in=FINAL_STATES)
                .select_related("job", "job__cluster"))
    return {s.pk: Target(s.pk, s.job.cluster_id, s.job.cluster_account_id, s.host, s.port)
            for s in sessions if wants_tunnel(s.job.cluster.options)}


@dataclass
class Held:
    target: Target
    forward: Forward
    base: int = 0  # connections an earlier process carried (its count goes on from there)
    connections: int = 0  # as last recorded
    problem: str = ""


class TunnelKeeper:
    def __init__(self, bind_host: str | None = None, ports: range | None = None, interval: float = 1.0) -> None:
        self.bind_host = bind_host or settings.KAKEHASHI_SESSION_TUNNEL_BIND
        self.ports = ports or port_range(settings.KAKEHASHI_SESSION_TUNNEL_PORTS)
        self.interval = interval
        self.started_at = timezone.now()
        self.held: dict[int, Held] = {}
        self._said: dict[int | str, str] = {}  # the last problem logged per session (or cluster): each is said once

    def step(self) -> None:
        """One reconciliation: say it runs, close what is no longer wanted, open what is wanted and not held,
        record counts."""
        self.beat()
        self._check_options()
        wanted = wanted_targets()
        recorded = {t.session_id: t for t in SessionTunnel.objects.filter(closed_at__isnull=True)}
        todo = plan(wanted, {k: h.target for k, h in self.held.items()}, recorded)
        for session_id in todo.close:
            held = self.held.pop(session_id)
            held.forward.close()
            log.info("closed the tunnel of session %s (:%s)", session_id, held.forward.port)
        if todo.forget:
            SessionTunnel.objects.filter(session_id__in=todo.forget, closed_at__isnull=True).update(closed_at=timezone.now())
            for session_id in todo.forget:
                recorded.pop(session_id, None)
                self._said.pop(session_id, None)
        for session_id in todo.open:
            self._open(wanted[session_id], recorded.get(session_id), {t.port for t in recorded.values()})
        for session_id, held in self.held.items():
            forward = held.forward
            carried = held.base + forward.connections
            if (carried, forward.last_error) != (held.connections, held.problem):
                held.connections, held.problem = carried, forward.last_error
                SessionTunnel.objects.filter(pk=session_id).update(connections=carried, problem=forward.last_error)
                if forward.last_error and self._said.get(session_id) != forward.last_error:
                    self._said[session_id] = forward.last_error
                    log.warning("session %s: a connection could not be carried: %s", session_id, forward.last_error)

    def beat(self) -> None:
        """The heartbeat the site's pages read (TunnelHeartbeat, one row): this process, seen now. First in each
        reconciliation, so a second process refusing to start names this one from its first second."""
        seen = {"host": socket.gethostname(), "pid": os.getpid(), "started_at": self.started_at,
                "interval": self.interval, "seen_at": timezone.now()}
        if not TunnelHeartbeat.objects.filter(pk=HEARTBEAT).update(**seen):  # one query a second, not three
            TunnelHeartbeat.objects.create(pk=HEARTBEAT, **seen)

    def _check_options(self) -> None:
        """A cluster whose option is not a boolean ("yes", 1) has no tunnels: say so once, for its admin."""
        for cluster in Cluster.objects.filter(**{"options__has_key": OPTION}).only("slug", "options"):
            problem = check_option(cluster.options)
            if problem and self._said.get(f"cluster {cluster.slug}") != problem:
                self._said[f"cluster {cluster.slug}"] = problem
                log.warning("cluster %s: %s (its sessions are reached directly, without a tunnel)", cluster.slug, problem)

    def _open(self, target: Target, row: SessionTunnel | None, taken: set[int]) -> None:
        try:
            backend = _backend(target)
            forward = None
            for port in candidate_ports(self.ports, taken, row.port if row else None):
                try:
                    forward = backend.forward(target.host, target.port, bind_host=self.bind_host, bind_port=port)
                    break
                except OSError:
                    continue  # another program holds it
            if forward is None:
                raise BackendError(f"no port to listen on ({'its port ' + str(row.port) if row else 'the range'} "
                                   "is taken)")
        except (BackendError, NoClusterAccount) as exc:
            problem = str(exc)[:500]
            if self._said.get(target.session_id) != problem:
                self._said[target.session_id] = problem
                log.warning("session %s: its tunnel cannot be opened: %s", target.session_id, problem)
            return
        now = timezone.now()
        if row is None:
            SessionTunnel.objects.update_or_create(session_id=target.session_id, defaults={
                "port": forward.port, "opened_at": now, "closed_at": None, "connections": 0, "problem": ""})
        carried = row.connections if row else 0
        self.held[target.session_id] = Held(target, forward, base=carried, connections=carried)
        log.info("%s the tunnel of session %s: :%s -> %s:%s through the login node", "opened" if row is None else
                 "listening again on", target.session_id, forward.port, target.host, target.port)

    def close_all(self) -> None:
        """Stop listening (this process stops). The tunnels stay recorded open: the next process takes them over."""
        for held in self.held.values():
            held.forward.close()
        self.held.clear()


def _backend(target: Target):
    """The session's backend, as its job's cluster account (the one it was submitted as)."""
    session = Session.objects.select_related("job__cluster", "job__cluster_account", "job__user",
                                             "job__project").get(pk=target.session_id)
    job = session.job
    account = job.cluster_account if job.cluster_account_id is not None else account_for(job.cluster, job.user,
                                                                                         job.project)
    return backend_for(job.cluster, account)
