"""An interactive session's payload: what runs on the allocation's first node to serve JupyterLab to the hub.

A session is a job like any other to every backend (the same directives, walltime, accounting); only its payload
differs. It starts `kakehashi_session.py` (below, shipped in the job directory), which does what batchspawner's
`batchspawner-singleuser` does for JupyterHub, but toward the portal: choose a free port, tell the portal the host
and port the server will listen on, then become the server. The hub's variables for its server (its API token
among them) arrive in `session.json`, a file only the job's owner can read (written from the staging archive, mode
0600): never on a command line, never in the job script a person reads. No Django here.
"""

from __future__ import annotations

import shlex

LAUNCHER_FILE = "kakehashi_session.py"
CONFIG_FILE = "session.json"

# Runs with the session software's python3 (the software provides JupyterLab, hence Python); standard library only.
LAUNCHER = r'''"""Kakehashi session launcher: tell the portal where this server will listen, then become the server."""
import json
import os
import socket
import sys
import urllib.parse
import urllib.request

here = os.environ.get("KAKEHASHI_JOB_DIR") or os.getcwd()
with open(os.path.join(here, "session.json")) as f:
    config = json.load(f)
os.remove(os.path.join(here, "session.json"))  # read once: the token lives on only in this process's environment
os.environ.update(config["env"])
os.environ["KAKEHASHI_SESSION"] = "1"  # the Lab extension shows the session's time, cost and budget

# The address of this node the portal (and so the hub beside it) reaches: the one it uses toward the portal.
target = urllib.parse.urlsplit(config["report_url"])
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    probe.connect((target.hostname, target.port or 80))
    host = probe.getsockname()[0]
finally:
    probe.close()
listener = socket.socket()
listener.bind((host, 0))
port = listener.getsockname()[1]
listener.close()  # the server binds it again a moment later (batchspawner's way; a clash fails the start loudly)

body = json.dumps({"host": host, "port": port}).encode()
request = urllib.request.Request(config["report_url"], data=body, method="POST", headers={
    "Content-Type": "application/json", "Authorization": "token " + os.environ["JUPYTERHUB_API_TOKEN"]})
with urllib.request.urlopen(request, timeout=30) as answer:
    print(f"kakehashi: reported {host}:{port} to the portal ({answer.status})", flush=True)
command = config["command"] + [f"--ip={host}", f"--port={port}"]
sys.stdout.flush()
os.chdir(os.path.expanduser("~"))  # Lab opens in the home directory, as Open OnDemand's does
os.execvp(command[0], command)
'''


def session_payload(command: str) -> str:
    """The payload of a session whose app runs `command` (admin-defined, e.g. `jupyterhub-singleuser`): the
    launcher replaces the shell, so the scheduler's signals (a cancel, the walltime) reach the server itself."""
    argv = shlex.split(command)
    if not argv:
        raise ValueError("a session app needs a command")
    return ('# An interactive session: the launcher reports this node\'s address to Kakehashi, then starts\n'
            f"#   {shlex.join(argv)}\n"
            f'exec python3 "$KAKEHASHI_JOB_DIR/{LAUNCHER_FILE}"\n')
