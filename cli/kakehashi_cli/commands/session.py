"""`kakehashi session start|list|stop`: interactive sessions, JupyterLab on a compute node opened through the hub
(docs/guide/sessions.md)."""

from __future__ import annotations

import argparse
import os

from kakehashi_cli.common import API, EXIT_OK, UsageError, client_for, money, print_json, table


def add_parser(sub, common) -> None:
    p = sub.add_parser("session", parents=[common],
                       help="interactive sessions (JupyterLab on a compute node): start, list, stop")
    p.add_argument("action", choices=["start", "list", "stop"])
    p.add_argument("id", nargs="?", type=int, help="the session's id (stop)")
    p.add_argument("--project", default=os.environ.get("KAKEHASHI_PROJECT"), help="project slug ($KAKEHASHI_PROJECT)")
    p.add_argument("--hardware", help="hardware slug (kakehashi hardware lists them)")
    p.add_argument("--software", help="software that provides JupyterLab there")
    p.add_argument("--walltime", default="01:00:00", help="HH:MM:SS, 90m, 2h (default 1 hour)")
    p.add_argument("--name", help="its name on the hub (default: chosen for you)")
    p.add_argument("--active", action="store_true", help="list: only sessions that have not ended")
    p.add_argument("--limit", type=int, default=20)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    client = client_for(args)
    if args.action == "start":
        missing = [name for name in ("project", "hardware", "software") if not getattr(args, name)]
        if missing:
            raise UsageError(f"session start needs --{' --'.join(missing)}")
        body = {"project": args.project, "hardware": args.hardware, "software": args.software,
                "walltime": args.walltime, **({"name": args.name} if args.name else {})}
        _, answer = client.post(f"{API}/sessions/", body)
        if args.json:
            print_json(answer)
        else:
            print(f"Starting session {answer['name']} ({money(answer.get('estimate'))} at most); the hub records it "
                  f"in a moment. Follow it with `kakehashi session list`; open it at {answer['connect_url']}")
        return EXIT_OK
    if args.action == "stop":
        if args.id is None:
            raise UsageError("session stop needs the session's id (kakehashi session list shows it)")
        _, session = client.post(f"{API}/sessions/{args.id}/stop/")
        if args.json:
            print_json(session)
        else:
            print(f"Stopping session {session['id']} ({session['name']}, {session['state']}).")
        return EXIT_OK
    page = client.get(f"{API}/sessions/", active="1" if args.active else None, limit=args.limit)
    sessions = page["results"]
    if args.json:
        print_json(sessions)
        return EXIT_OK
    if not sessions:
        print("No sessions yet.")
        return EXIT_OK
    rows = [[str(s["id"]), s["name"], s["state"], s["project"], s.get("hardware") or s["cluster"],
             f"{s['seconds_left'] // 60} min" if s.get("seconds_left") is not None else "—",
             money(s.get("cost_so_far") or s.get("estimate")),
             s["connect_url"] if s.get("ready") else (s.get("state_reason") or s.get("ended_why") or "")]
            for s in sessions]
    print(table(rows, ["ID", "NAME", "STATE", "PROJECT", "HARDWARE", "LEFT", "COST", "OPEN AT / WHY"]))
    return EXIT_OK
