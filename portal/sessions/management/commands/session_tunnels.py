"""`manage.py session_tunnels`: hold the SSH tunnels of sessions on clusters with the option `session_tunnel`
(portal/sessions/tunnel_keeper.py, docs/decisions/0056). One such process per site, beside the Celery worker; it
reconciles with the database every `--interval` seconds and stops on SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import signal
import threading

from django.core.management.base import BaseCommand
from django.db import close_old_connections

from portal.sessions.tunnel_keeper import TunnelKeeper

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
        keeper = TunnelKeeper()
        self.stdout.write(f"session tunnels: listening on {keeper.bind_host}, ports {keeper.ports.start}-"
                          f"{keeper.ports.stop - 1}; reconciling every {interval:g} s")
        self.stdout.flush()
        try:
            while not stop.is_set():
                try:
                    keeper.step()
                except Exception:  # noqa: BLE001 - the database away, a bad row: held tunnels stay, try again
                    log.exception("session tunnels: reconciliation failed; trying again")
                    close_old_connections()
                stop.wait(interval)
        finally:
            keeper.close_all()
        self.stdout.write("session tunnels: stopped")
