"""SSH to the login node: pinned host keys, pooled connections with TCP_NODELAY, timeouts, SFTP reads."""

from __future__ import annotations

import socket
import time

import pytest

from backends.transport import HostKeyMismatch, SSHTransport, TransportError
from portal.clusters.actions import generate_key_pair

pytestmark = pytest.mark.cluster


def test_a_command_runs_as_the_user_and_the_connection_is_reused_with_nodelay(transport_for):
    transport = transport_for("slurm", "alice")
    assert transport.run(["id", "-un"]).stdout.strip() == "alice"
    conn = transport._connection()
    client = conn.client
    sock = client.get_transport().sock
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    started = time.perf_counter()
    for _ in range(20):
        assert transport.run(["true"]).ok
    per_exec = (time.perf_counter() - started) / 20
    assert transport._connection().client is client  # same connection, not a new login per command
    assert per_exec < 0.04, f"{per_exec * 1000:.1f} ms per exec: is Nagle back on?"


def test_a_command_that_refuses_before_reading_its_input_says_why_rather_than_socket_is_closed(transport_for):
    # More input than the channel's window: the command has ended (and its channel closed) long before all of it
    # could be sent. Its own exit status and words are the answer, as the staging's checks rely on.
    transport = transport_for("slurm", "alice")
    for _ in range(3):
        result = transport.run_shell("echo 'the cache is private' >&2; exit 3", stdin=b"x" * (16 << 20), timeout=30)
        assert (result.exit_status, result.stderr.strip()) == (3, "the cache is private")
    assert transport.run(["true"]).ok  # the connection is still good


def test_arguments_reach_the_login_node_verbatim(transport_for):
    nasty = ["$(touch /tmp/kakehashi-pwned)", "a b", "'", '"', ";", "`id`", "\\", "*"]
    result = transport_for("slurm", "alice").run(["printf", "%s\\n", *nasty])
    assert result.stdout.splitlines() == nasty


def test_a_changed_host_key_is_refused(test_cluster, user_key):
    _, other_public = generate_key_pair("not-the-login-node")
    pinned = f"[127.0.0.1]:2222 {' '.join(other_public.split()[:2])}\n"
    transport = SSHTransport("127.0.0.1", 2222, "alice", user_key("alice"), pinned, timeout=10)
    with pytest.raises(HostKeyMismatch, match="not pinned|different"):
        transport.run(["true"])


def test_a_host_with_no_pinned_key_is_refused_not_trusted_on_first_use(test_cluster, user_key, known_hosts):
    only_other_port = "\n".join(line for line in known_hosts.splitlines() if line.startswith("[127.0.0.1]:2225 "))
    transport = SSHTransport("127.0.0.1", 2222, "alice", user_key("alice"), only_other_port, timeout=10)
    with pytest.raises(HostKeyMismatch, match="not pinned"):
        transport.run(["true"])


def test_a_key_that_is_not_installed_gets_a_clear_message(known_hosts):
    private, _ = generate_key_pair("never-installed")
    transport = SSHTransport("127.0.0.1", 2222, "alice", private, known_hosts, timeout=10)
    with pytest.raises(TransportError, match="refused the key for alice"):
        transport.run(["true"])


def test_an_unreachable_login_node_and_a_slow_command_time_out(known_hosts, user_key, transport_for):
    with pytest.raises(TransportError, match="cannot reach 127.0.0.1:2299"):
        SSHTransport("127.0.0.1", 2299, "alice", user_key("alice"), known_hosts, timeout=5).run(["true"])
    started = time.perf_counter()
    with pytest.raises(TransportError, match="timed out"):
        transport_for("slurm", "alice").run(["sleep", "10"], timeout=1)
    assert time.perf_counter() - started < 5


def test_files_are_read_over_sftp_from_an_offset(transport_for):
    transport = transport_for("slurm", "bob")
    transport.run_shell("mkdir -p kakehashi-tests && printf 'hello world' > kakehashi-tests/read.txt")
    assert transport.read_file("kakehashi-tests/read.txt") == b"hello world"
    assert transport.read_file("kakehashi-tests/read.txt", offset=6, limit=3) == b"wor"
    assert transport.read_file("kakehashi-tests/does-not-exist") == b""


def test_commands_sent_at_once_from_several_threads_share_one_connection_as_channels(transport_for):
    """What a worker process does when one dispatch submits several jobs (docs/decisions/0022): one login, channels."""
    from concurrent.futures import ThreadPoolExecutor

    transport = transport_for("slurm", "alice")
    transport.run(["true"])
    client = transport._connection().client
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=8) as pool:
        # SSH_CONNECTION names the client's address and port: the same for every command on one connection.
        answers = list(pool.map(lambda _: transport.run_shell('sleep 0.5; echo "$SSH_CONNECTION"'), range(8)))
    elapsed = time.perf_counter() - started
    assert all(answer.ok for answer in answers)
    assert len({answer.stdout.strip() for answer in answers}) == 1
    assert transport._connection().client is client
    assert elapsed < 8 * 0.5 / 2, f"{elapsed:.1f} s for 8 half-second commands: they did not run side by side"


def _negotiated_cipher(argv: list[str]) -> str:
    """The cipher an OpenSSH stream of `backends/openssh.py` negotiates, from its own debug log."""
    import re
    import subprocess

    from backends import openssh

    verbose = [argv[0], "-v", *argv[1:], "true"]
    done = subprocess.run(verbose, capture_output=True, text=True, timeout=60, env=openssh.environment())
    assert done.returncode == 0, done.stderr[-2000:]
    return re.search(r"kex: client->server cipher: (\S+)", done.stderr).group(1)


def test_dataset_streams_offer_aes_gcm_first_and_a_site_may_name_its_own_ciphers(test_cluster, user_key, known_hosts):
    """Bulk bytes go through OpenSSH's client (docs/decisions/0041): by default AES-GCM is offered ahead of OpenSSH's
    own list, so a login node that allows it (as this one does) uses it; a site's `ssh_ciphers` replaces the list."""
    from backends import openssh
    from backends.transport import load_private_key

    private = user_key("alice")
    key = load_private_key(private)
    public = f"{key.get_name()} {key.get_base64()}"
    with openssh.session("127.0.0.1", 2222, "alice", private, public, known_hosts) as argv:
        assert _negotiated_cipher(argv) == "aes128-gcm@openssh.com"
    with openssh.session("127.0.0.1", 2222, "alice", private, public, known_hosts,
                         ciphers="chacha20-poly1305@openssh.com") as argv:
        assert _negotiated_cipher(argv) == "chacha20-poly1305@openssh.com"
    with pytest.raises(ValueError, match="not a list of OpenSSH cipher names"):
        with openssh.session("127.0.0.1", 2222, "alice", private, public, known_hosts, ciphers="aes; rm -rf /"):
            pass
