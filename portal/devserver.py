"""`make run`: the development web server and a Celery worker (with beat) together; Ctrl-C stops both."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "portal.settings")}
    env.setdefault("KAKEHASHI_TRACK_INTERVAL", "2")  # a demo should feel live
    var = Path(env.get("KAKEHASHI_VAR_DIR", ROOT / "var"))
    for sub in ("processed", "control"):
        (var / "broker" / sub).mkdir(parents=True, exist_ok=True)
    address = env.get("KAKEHASHI_ADDRESS", "127.0.0.1:8000")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "workers", "worker", "-B", "-s", str(var / "beat-schedule"),
         "--concurrency", "2", "--loglevel", "INFO"],
        cwd=ROOT, env=env,
    )
    web = subprocess.Popen([sys.executable, "manage.py", "runserver", address, "--noreload"], cwd=ROOT, env=env)
    print(f"Kakehashi on http://{address}/ (Ctrl-C to stop)", flush=True)
    try:
        while worker.poll() is None and web.poll() is None:
            try:
                web.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
    except KeyboardInterrupt:
        pass
    finally:
        for proc in (web, worker):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in (web, worker):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
