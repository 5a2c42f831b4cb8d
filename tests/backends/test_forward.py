"""A backend's forward (backends/forward.py): a local port carried to one host:port, on the portal's own host and
through the test cluster's real login node (sshd on 127.0.0.1:2222) as alice, host keys pinned."""

from __future__ import annotations

import socket
import threading

import pytest

from backends.base import BackendError
from backends.local import LocalBackend
from backends.slurm import SlurmBackend
from backends.transport import LocalTransport, SSHTransport
from portal.clusters.actions import generate_key_pair
from tests.conftest import listening, wait_for


@pytest.fixture
def upper_echo():
    """A server on 127.0.0.1 answering each chunk in upper case, and saying whom it served."""
    server = socket.create_server(("127.0.0.1", 0))
    served = []

    def serve():
        while True:
            try:
                client, peer = server.accept()
            except OSError:
                return
            served.append(peer)
            with client:
                while data := client.recv(4096):
                    client.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], served
    server.close()


def ask(port: int, words: bytes) -> bytes:
    """What the far end answers to `words` ("" when the forward closed the connection unanswered)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(words)
        try:
            return conn.recv(4096)
        except ConnectionResetError:  # closed with our words unread
            return b""


def test_a_forward_carries_bytes_both_ways_to_its_one_target_and_stops_listening_once_closed(upper_echo, tmp_path):
    port, served = upper_echo
    forward = LocalBackend(LocalTransport(tmp_path)).forward("127.0.0.1", port)
    try:
        assert forward.port != port and forward.target == ("127.0.0.1", port)
        assert ask(forward.port, b"hello") == b"HELLO"
        assert ask(forward.port, b"again") == b"AGAIN"
        assert forward.connections == 2 and len(served) == 2
        wait_for(lambda: forward.active == 0, timeout=5, message="the carried connections closed")
    finally:
        forward.close()
    assert not listening(forward.port)


@pytest.mark.cluster
def test_a_forward_through_the_login_node_reaches_a_port_the_login_node_reaches_as_the_account(
        upper_echo, transport_for):
    port, served = upper_echo
    transport = transport_for("slurm", "alice")
    forward = SlurmBackend(transport).forward("127.0.0.1", port)
    try:
        assert ask(forward.port, b"through ssh") == b"THROUGH SSH"
        assert forward.connections == 1 and forward.failures == 0
        # Carried as a channel of the account's one pooled connection, not a connection of its own.
        assert transport.run(["id", "-un"]).stdout.strip() == "alice"
    finally:
        forward.close()
    assert not listening(forward.port)


@pytest.mark.cluster
def test_a_forward_to_a_port_nobody_listens_on_closes_the_connection_and_says_the_login_node_could_not_open_it(
        transport_for):
    nobody = socket.create_server(("127.0.0.1", 0))
    port = nobody.getsockname()[1]
    nobody.close()
    forward = SlurmBackend(transport_for("slurm", "alice")).forward("127.0.0.1", port)
    try:
        assert ask(forward.port, b"anyone?") == b""
        wait_for(lambda: forward.failures == 1, timeout=10, message="the refusal counted")
        assert forward.connections == 0 and "could not open 127.0.0.1:" in forward.last_error
    finally:
        forward.close()


@pytest.mark.cluster
def test_a_forward_through_a_login_node_whose_host_key_is_not_the_pinned_one_carries_nothing(
        upper_echo, test_cluster, user_key):
    port, served = upper_echo
    _, other_public = generate_key_pair("not-the-login-node")
    pinned = f"[127.0.0.1]:2222 {' '.join(other_public.split()[:2])}\n"
    transport = SSHTransport("127.0.0.1", 2222, "alice", user_key("alice"), pinned, timeout=10)
    forward = SlurmBackend(transport).forward("127.0.0.1", port)
    try:
        assert ask(forward.port, b"secret") == b""
        wait_for(lambda: forward.failures == 1, timeout=10, message="the refusal counted")
        assert "HostKeyMismatch" in forward.last_error and served == []
    finally:
        forward.close()
        transport.close()


def test_a_backend_that_only_renders_scripts_cannot_forward():
    with pytest.raises(BackendError, match="only renders"):
        SlurmBackend(None).forward("127.0.0.1", 8888)
