"""`manage.py session_tunnels`: hold the SSH tunnels of sessions on clusters with the option `session_tunnel`
(portal/sessions/tunnel_keeper.py, docs/decisions/0056). One such process per site, beside the Celery worker: it
holds the site's lock for its life (portal/sessions/tunnel_lock.py), and a second one refuses to start, exiting with
status 1 and naming the one that runs. It reconciles with the database every `--interval` seconds, each time
recording that it runs (the site's pages read it), and stops on SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading

from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from portal.sessions.models import TunnelHeartbeat
from portal.sessions.tunnel_keeper import TunnelKeeper
from portal.sessions.tunnel_lock import HeldElsewhere, SiteLock
from portal.sessions.tunnels import refusal

log = logging.getLogger("kakehashi.tunnels")


class Command(BaseCommand):
    help = "Hold the SSH tunnels through login nodes that sessions on clusters with session_tunnel are reached by."

    def add_arguments(self, parser):
        parser.add_argument("--interval", type=float, default=1.0, help="seconds between two reconciliations")

    def handle(self, *args, interval: float, **options):
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        # paramiko logs every refused channel as an error (a session's server not yet listening is one each time the
        # hub knocks): the keeper says it once per session, and the tunnel's row keeps the last reason.
        logging.getLogger("paramiko.transport").setLevel(logging.CRITICAL)
        lock = SiteLock(name=f"session_tunnels {os.getpid()}@{socket.gethostname()}")
        try:
            lock.acquire()
        except HeldElsewhere:
            raise CommandError(refusal(TunnelHeartbeat.objects.first())) from None
        keeper = TunnelKeeper(interval=interval)
        keeper.beat()  # a second process refusing to start names this one from now on
        self.stdout.write(f"session tunnels: listening on {keeper.bind_host}, ports {keeper.ports.start}-"
                          f"{keeper.ports.stop - 1}; reconciling every {interval:g} s; holding the site's lock "
                          f"({lock.where})")
        self.stdout.flush()
        try:
            while not stop.is_set():
                try:
                    # The lock's connection lost and not taken again yet (the database away): nothing is opened or
                    # closed, no heartbeat, until it is; lost to another process: HeldElsewhere, this one stops.
                    if lock.check():
                        keeper.step()
                except HeldElsewhere:
                    holder = TunnelHeartbeat.objects.first()  # this one's own until the other has written its own
                    mine = holder is not None and (holder.pid, holder.host) == (os.getpid(), socket.gethostname())
                    raise CommandError(refusal(None if mine else holder, lost=True)) from None
                except Exception:  # noqa: BLE001 - the database away, a bad row: held tunnels stay, try again
                    log.exception("session tunnels: reconciliation failed; trying again")
                    close_old_connections()
                stop.wait(interval)
        finally:
            keeper.close_all()
            lock.release()
        self.stdout.write("session tunnels: stopped")
