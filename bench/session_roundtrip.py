"""A session's traffic through the SSH tunnel (cluster option session_tunnel, docs/decisions/0056) against a direct
connection to the node, in the same run.

Run with `python -m bench.session_roundtrip` (the loopback test cluster must be up: tests/cluster/up.sh; the hub's
proxy installed: `make hub-deps`). It starts a Jupyter server (the "node": jupyter_server with JupyterLab, the base
URL a session's server has on the hub), two configurable-http-proxy processes (the hub's proxy, as JupyterHub runs
it) and a session tunnel: `SlurmBackend.forward` through the Slurm login node (sshd on 127.0.0.1:2222) as alice, the
very code the tunnel process runs. Then, rounds alternating between the paths (the order rotating each round):

- direct:          the client straight to the node (what no hub does: the yardstick);
- proxy:           through the hub's proxy to the node (a site whose hub reaches its nodes);
- tunnel:          through the tunnel alone;
- proxy + tunnel:  through the hub's proxy to the tunnel, and on through the login node to the node (this change).

For each: an HTTP request's round trip (`GET …/api/status`, one kept-alive connection to the first hop), a kernel
message's round trip on Lab's websocket (`kernel_info_request` → `kernel_info_reply`), and a 4 MiB file read
(`GET …/files/`). Medians and 95th percentiles; the ratio to direct. Results: printed and written to
bench/results-session-roundtrip.md. Knobs: BENCH_ROUNDS (10), BENCH_PER_ROUND (30 requests and messages per path
per round), BENCH_FILE_MIB (4).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CLUSTER = Path(os.environ.get("KAKEHASHI_CLUSTER_DIR", "/var/tmp/kakehashi-cluster"))
PROXY = ROOT / "jupyterhub" / "node_modules" / ".bin" / "configurable-http-proxy"
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "10"))
PER_ROUND = int(os.environ.get("BENCH_PER_ROUND", "30"))
FILE_MIB = int(os.environ.get("BENCH_FILE_MIB", "4"))
PREFIX = "/user/bench/lab/"
OUT = Path(os.environ.get("BENCH_OUT", ROOT / "bench" / "results-session-roundtrip.md"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(url: str, headers: dict | None = None, timeout: float = 60) -> None:
    import requests

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if requests.get(url, headers=headers, timeout=2).status_code < 500:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer")


def start_node(work: Path, token: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    (work / "big.bin").write_bytes(os.urandom(FILE_MIB << 20))
    proc = subprocess.Popen([sys.executable, "-m", "jupyter", "server", f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1",
                             f"--ServerApp.base_url={PREFIX}", f"--IdentityProvider.token={token}",
                             f"--ServerApp.root_dir={work}", "--ServerApp.open_browser=False", "--allow-root"],
                            cwd=work, stdout=open(work / "server.log", "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    wait_http(f"http://127.0.0.1:{port}{PREFIX}api/status", {"Authorization": f"token {token}"})
    return proc, port


def start_proxy(work: Path, name: str, target: str) -> tuple[subprocess.Popen, int]:
    import requests

    port, api = free_port(), free_port()
    auth = secrets.token_hex(16)
    proc = subprocess.Popen([str(PROXY), "--ip", "127.0.0.1", "--port", str(port), "--api-ip", "127.0.0.1",
                             "--api-port", str(api)], env={**os.environ, "CONFIGPROXY_AUTH_TOKEN": auth},
                            stdout=open(work / f"{name}.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    wait_http(f"http://127.0.0.1:{api}/api/routes", {"Authorization": f"token {auth}"})
    answer = requests.post(f"http://127.0.0.1:{api}/api/routes{PREFIX.rstrip('/')}", json={"target": target},
                           headers={"Authorization": f"token {auth}"}, timeout=10)
    answer.raise_for_status()
    return proc, port


def timed_gets(session, url: str, token: str, n: int, timeout: float, expect_bytes: int | None = None) -> list[float]:
    """Seconds each of `n` GETs of `url` took, the server's token sent as Jupyter takes it; each must succeed (and
    bring `expect_bytes`, if given)."""
    times = []
    for _ in range(n):
        started = time.perf_counter()
        answer = session.get(url, headers={"Authorization": f"token {token}"}, timeout=timeout)
        times.append(time.perf_counter() - started)
        assert answer.status_code == 200, answer.text[:200]
        assert expect_bytes is None or len(answer.content) == expect_bytes
    return times


def http_rounds(session, base: str, token: str, n: int) -> list[float]:
    return timed_gets(session, f"{base}{PREFIX}api/status", token, n, timeout=30)


def file_reads(session, base: str, token: str, n: int) -> list[float]:
    return timed_gets(session, f"{base}{PREFIX}files/big.bin", token, n, timeout=60, expect_bytes=FILE_MIB << 20)


class Kernel:
    """One websocket to the kernel's channels through one path, kept open across rounds (as Lab keeps it)."""

    def __init__(self, base: str, kernel_id: str, token: str) -> None:
        self.url = f"{base.replace('http://', 'ws://')}{PREFIX}api/kernels/{kernel_id}/channels"
        self.token, self.session, self.conn = token, uuid.uuid4().hex, None

    async def open(self) -> None:
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        self.conn = await websocket_connect(HTTPRequest(self.url, headers={"Authorization": f"token {self.token}"}))
        self.conn.stream.set_nodelay(True)  # as a browser's websocket: no Nagle wait on small frames
        await self.rounds(3)  # the kernel answers (it may still be starting)

    async def rounds(self, n: int) -> list[float]:
        times = []
        for _ in range(n):
            msg_id = uuid.uuid4().hex
            message = {"header": {"msg_id": msg_id, "msg_type": "kernel_info_request", "username": "bench",
                                  "session": self.session, "date": "", "version": "5.3"},
                       "parent_header": {}, "metadata": {}, "content": {}, "channel": "shell", "buffers": []}
            started = time.perf_counter()
            await self.conn.write_message(json.dumps(message))
            while True:
                reply = json.loads(await self.conn.read_message())
                if reply.get("msg_type") == "kernel_info_reply" and reply["parent_header"].get("msg_id") == msg_id:
                    break
            times.append(time.perf_counter() - started)
        return times


def figure(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[int(len(ordered) * 0.95) - 1] * 1000


def main() -> int:
    import requests

    from backends.slurm import SlurmBackend
    from backends.transport import SSHTransport

    if not PROXY.exists():
        print("configurable-http-proxy is not installed: run `make hub-deps`")
        return 2
    work = Path(tempfile.mkdtemp(prefix="kakehashi-bench-session-"))
    token = secrets.token_hex(16)
    procs = []
    transport = SSHTransport("127.0.0.1", 2222, "alice", (CLUSTER / "keys" / "alice").read_text(),
                             (CLUSTER / "known_hosts").read_text(), timeout=30)
    forward = None
    try:
        node, node_port = start_node(work, token)
        procs.append(node)
        forward = SlurmBackend(transport).forward("127.0.0.1", node_port)
        direct_proxy, direct_proxy_port = start_proxy(work, "proxy-direct", f"http://127.0.0.1:{node_port}")
        tunnel_proxy, tunnel_proxy_port = start_proxy(work, "proxy-tunnel", f"http://127.0.0.1:{forward.port}")
        procs += [direct_proxy, tunnel_proxy]
        paths = {"direct": f"http://127.0.0.1:{node_port}", "proxy": f"http://127.0.0.1:{direct_proxy_port}",
                 "tunnel": f"http://127.0.0.1:{forward.port}", "proxy + tunnel": f"http://127.0.0.1:{tunnel_proxy_port}"}
        kernel_id = requests.post(f"{paths['direct']}{PREFIX}api/kernels", json={"name": "python3"}, timeout=60,
                                  headers={"Authorization": f"token {token}"}).json()["id"]
        sessions = {name: requests.Session() for name in paths}
        kernels = {name: Kernel(base, kernel_id, token) for name, base in paths.items()}
        loop = asyncio.new_event_loop()
        for kernel in kernels.values():
            loop.run_until_complete(kernel.open())
        for name, base in paths.items():  # warm: connections open, the server's handlers imported
            http_rounds(sessions[name], base, token, 5)
            file_reads(sessions[name], base, token, 1)
        http = {name: [] for name in paths}
        ws = {name: [] for name in paths}
        files = {name: [] for name in paths}
        order = list(paths)
        for round_ in range(ROUNDS):
            for name in order[round_ % len(order):] + order[:round_ % len(order)]:
                http[name] += http_rounds(sessions[name], paths[name], token, PER_ROUND)
                ws[name] += loop.run_until_complete(kernels[name].rounds(PER_ROUND))
                files[name] += file_reads(sessions[name], paths[name], token, 2)
        loop.close()
        assert forward.failures == 0 and forward.connections >= 2
        report = render(http, ws, files, forward)
    finally:
        if forward is not None:
            forward.close()
        transport.close()
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(report)
    OUT.write_text(report)
    return 0


def render(http, ws, files, forward) -> str:
    load = os.getloadavg()[0]
    base_http, base_ws, base_file = (statistics.median(x["direct"]) for x in (http, ws, files))
    lines = [
        "# A session's round trips: the hub's proxy and the SSH tunnel against the node directly",
        "",
        f"`python -m bench.session_roundtrip`, {time.strftime('%Y-%m-%d')}, loopback test cluster (the tunnel through "
        f"the Slurm login node, sshd on 127.0.0.1:2222, as alice), load average {load:.1f} on 2 shared cores. "
        f"{ROUNDS} rounds alternating the paths; per path {len(http['direct'])} HTTP requests, "
        f"{len(ws['direct'])} kernel messages, {len(files['direct'])} reads of a {FILE_MIB} MiB file. "
        f"The tunnel carried {forward.connections} connections, none refused.",
        "",
        "| Path | HTTP `api/status` median (p95) | × direct | kernel message median (p95) | × direct | "
        f"{FILE_MIB} MiB file median | × direct |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in http:
        h, hp = figure(http[name])
        w, wp = figure(ws[name])
        f, _ = figure(files[name])
        lines.append(f"| {name} | {h:.2f} ms ({hp:.2f}) | {h / (base_http * 1000):.2f} | {w:.2f} ms ({wp:.2f}) | "
                     f"{w / (base_ws * 1000):.2f} | {f:.1f} ms | {f / (base_file * 1000):.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
