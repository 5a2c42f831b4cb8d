"""A local listening port whose every connection is carried to one fixed host:port through a backend's stream.

What a session tunnel is (docs/decisions/0056): the hub's proxy connects to this port on the portal's side, and
each connection is carried, byte for byte both ways, on a stream the backend opens (an SSH direct-tcpip channel
through the login node, as the session's cluster account: `Transport.open_stream`) to the host and port the
session's server reported. The target is fixed when the forward is made: nothing that connects here can choose
another. Plain Python, no Django: the portal asks a backend for a forward (`Backend.forward`) and sees neither
sockets' far ends nor SSH.

One thread accepts; one thread per carried connection copies bytes both ways (a Lab session holds a few: its
kernels' websockets and the requests in flight).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Callable
from typing import Protocol


class Stream(Protocol):
    """What a backend hands back to carry one connection: a socket, or an SSH channel (both have these)."""

    def fileno(self) -> int: ...
    def recv(self, size: int) -> bytes: ...
    def sendall(self, data: bytes) -> None: ...
    def close(self) -> None: ...


CHUNK = 65536
ACCEPT_POLL_SECONDS = 0.5


class Forward:
    """Listens on (bind_host, bind_port) (0: any free port; `port` says which) and carries each connection to
    `target` on a stream from `open_stream` (called once per connection, on that connection's thread)."""

    def __init__(self, open_stream: Callable[[], Stream], target: tuple[str, int], *, bind_host: str = "127.0.0.1",
                 bind_port: int = 0) -> None:
        self.target = (str(target[0]), int(target[1]))
        self._open_stream = open_stream
        # SO_REUSEADDR (create_server's default here): a tunnel process restarted after a crash binds its port again
        # at once, though connections it carried linger in TIME_WAIT.
        family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
        self._listener = socket.create_server((bind_host, int(bind_port)), family=family)
        self._listener.settimeout(ACCEPT_POLL_SECONDS)
        self.bind_host = bind_host
        self.port = self._listener.getsockname()[1]
        self.connections = 0  # carried so far (a stream was opened for them)
        self.failures = 0  # connections whose stream could not be opened (the login node away, a host key changed…)
        self.last_error = ""  # why the latest connection could not be carried ("" once one is again)
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name=f"kakehashi-forward-{self.port}")
        self._thread.start()

    def __repr__(self) -> str:
        return f"Forward({self.bind_host}:{self.port} -> {self.target[0]}:{self.target[1]})"

    @property
    def active(self) -> int:
        with self._lock:
            return len(self._open)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self) -> None:
        """Stop listening and cut every connection it carries."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread at once (Linux)
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            clients = list(self._open)
        for client in clients:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)
        self._thread.join(ACCEPT_POLL_SECONDS * 4)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._closed.is_set():
                    return
                continue
            client.settimeout(None)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._open.add(client)
            threading.Thread(target=self._carry, args=(client,), daemon=True,
                             name=f"kakehashi-forward-{self.port}-conn").start()

    def _carry(self, client: socket.socket) -> None:
        stream = None
        try:
            try:
                stream = self._open_stream()
            except Exception as exc:  # noqa: BLE001 - any failure of the far end: this connection is refused
                with self._lock:
                    self.failures += 1
                    self.last_error = f"{type(exc).__name__}: {exc}"[:500]
                return
            with self._lock:
                self.connections += 1
                self.last_error = ""  # the far end answers again
            _copy_both_ways(client, stream, self._closed)
        finally:
            with self._lock:
                self._open.discard(client)
            for end in (stream, client):
                if end is not None:
                    with contextlib.suppress(Exception):
                        end.close()


def _copy_both_ways(client: socket.socket, stream: Stream, stop: threading.Event) -> None:
    """Copy bytes between the two ends until either closes (or the forward is closed)."""
    ends = [client, stream]
    while not stop.is_set():
        try:
            ready, _, _ = select.select(ends, [], [], 1.0)
        except (OSError, ValueError):  # an end closed under us
            return
        for end in ready:
            other = stream if end is client else client
            try:
                data = end.recv(CHUNK)
                if not data:
                    return
                other.sendall(data)
            except Exception:  # noqa: BLE001 - a socket's OSError, an SSH channel's own: either end is gone
                return
