"""One tunnel process per site (docs/decisions/0056, "One process per site, by a lock"): `manage.py session_tunnels`
holds this lock for its whole life, and a second one refuses to start while it is held.

- PostgreSQL (every deployment but `make run`'s default): a session-level advisory lock, on a connection of its own
  that lives as long as the process. Where tunnel processes run on several hosts the database is the one thing they
  share, so the lock is there; PostgreSQL releases it as soon as the holder's connection ends, whatever ended it (a
  clean stop, SIGKILL, the holder's crash), so nothing stale is ever left to clean up. Not Django's own connection:
  `close_old_connections()` after a failed reconciliation would close it, and the lock with it.
- SQLite (`make run`): a file lock (flock) on a file beside the database file. SQLite is one file on one host, so
  every process that can share it can share that lock; the kernel releases it when the holder exits, however.
- Anything else: no lock (said once in the log); one process per site is then the operator's to keep.

If the lock's connection is lost (PostgreSQL restarted), the lock went with it: `check` takes it again, or, if
another process took it meanwhile, says so, and the process stops.
"""

from __future__ import annotations

import copy
import fcntl
import logging
import os
import zlib
from pathlib import Path

from django.db import Error, connections
from django.db.utils import load_backend

log = logging.getLogger("kakehashi.tunnels")

# pg_try_advisory_lock's key: advisory locks are per database, so this only has to differ from the site's other ones.
KEY = zlib.crc32(b"kakehashi manage.py session_tunnels")
# The lock's connection, over TCP: PostgreSQL probes it after 30 s idle, every 10 s, and drops it (releasing the
# lock) after 3 unanswered probes; libpq likewise, and gives up on data unacknowledged for 60 s. (Ignored on a Unix
# socket, where a vanished peer cannot happen.)
KEEPALIVES_SERVER = {"tcp_keepalives_idle": "30", "tcp_keepalives_interval": "10", "tcp_keepalives_count": "3"}
KEEPALIVES_CLIENT = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3,
                     "tcp_user_timeout": 60_000, "connect_timeout": 10}


class HeldElsewhere(Exception):
    """Another tunnel process holds the site's lock."""


class SiteLock:
    """The site's one-tunnel-process lock. `acquire` raises HeldElsewhere; `check`, each reconciliation, returns
    whether it is held now (False while the database is away) and raises HeldElsewhere once another took it."""

    def __init__(self, alias: str = "default", name: str = "session_tunnels") -> None:
        self.alias = alias
        self.name = name[:63]  # what pg_stat_activity shows as the lock connection's application_name
        self.vendor = connections[alias].vendor
        self._conn = None  # PostgreSQL: the lock's own connection
        self._fd: int | None = None  # SQLite: the locked file
        self._held = False
        self._lost = False  # the lock's connection lost and not opened again yet

    @property
    def where(self) -> str:
        """What holds the lock, for the process's first line of output."""
        if self.vendor == "postgresql":
            return f"PostgreSQL advisory lock {KEY}"
        if self.vendor == "sqlite" and self._path():
            return f"file lock {self._path()}"
        return "no lock"

    def acquire(self) -> None:
        if self.vendor == "postgresql":
            self._acquire_postgres()
        elif self.vendor == "sqlite" and self._path():
            self._acquire_file()
        else:
            log.warning("session tunnels: no lock on a %s database: make sure one process runs per site", self.vendor)
        self._held = True

    def check(self) -> bool:
        if self.vendor != "postgresql":
            return self._held
        if self._conn is not None:
            try:
                with self._conn.cursor() as cursor:
                    cursor.execute("SELECT 1")
                return True
            except Error:
                self._drop_connection()
        try:
            self._acquire_postgres()
        except Error as exc:
            if not self._lost:  # said once an outage, not every second of it
                log.warning("session tunnels: the lock's connection was lost and cannot be opened again yet; the "
                            "tunnels held stay open, none is opened or closed meanwhile: %s", str(exc).strip())
            self._lost = True
            return False
        log.info("session tunnels: the lock's connection was lost; the lock is held again")
        self._lost = False
        return True

    def release(self) -> None:
        self._drop_connection()
        if self._fd is not None:
            os.close(self._fd)  # the file stays: removing it would let two processes lock two different files
            self._fd = None
        self._held = False

    # ---------------------------------------------------------------------------------------------- PostgreSQL

    def _acquire_postgres(self) -> None:
        # A wrapper of its own, not in `connections`: nothing else closes it. Its TCP is watched both ways, so a
        # holder whose host vanished (no FIN ever sent) loses the lock in about a minute, not PostgreSQL's default
        # two hours of silence, and this process's check of a dead path fails in a minute instead of hanging.
        settings_dict = copy.deepcopy(connections.settings[self.alias])
        settings_dict["OPTIONS"] = {**settings_dict.get("OPTIONS", {}), **KEEPALIVES_CLIENT}
        conn = load_backend(settings_dict["ENGINE"]).DatabaseWrapper(settings_dict, self.alias)
        try:
            conn.ensure_connection()
            with conn.cursor() as cursor:
                cursor.execute("SELECT set_config('application_name', %s, false)", [self.name])
                for name, value in KEEPALIVES_SERVER.items():
                    cursor.execute("SELECT set_config(%s, %s, false)", [name, value])
                cursor.execute("SELECT pg_try_advisory_lock(%s)", [KEY])
                (got,) = cursor.fetchone()
        except BaseException:
            conn.close()
            raise
        if not got:
            conn.close()
            raise HeldElsewhere
        self._conn = conn

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()  # ends the session: PostgreSQL releases the lock
            except Error:
                pass
            self._conn = None

    # -------------------------------------------------------------------------------------------------- SQLite

    def _path(self) -> Path | None:
        """The lock file beside the SQLite database file (None for an in-memory database, which no two processes
        share anyway)."""
        name = str(connections[self.alias].settings_dict["NAME"])
        if not name or name == ":memory:" or name.startswith("file:") or "mode=memory" in name:
            return None
        database = Path(name)
        return database.with_name(database.name + ".session-tunnels.lock")

    def _acquire_file(self) -> None:
        fd = os.open(self._path(), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise HeldElsewhere from None
        self._fd = fd
