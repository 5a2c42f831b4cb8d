"""`kakehashi status`: One job (with --events, its history: each cause, who or what, why), or a table of recent jobs."""

from __future__ import annotations

import argparse
import sys

from kakehashi_cli.common import (
    API,
    EXIT_OK,
    EXIT_USAGE,
    client_for,
    job_lines,
    money,
    print_json,
    table,
    when,
)


def add_parser(sub, common) -> None:
    p = sub.add_parser("status", parents=[common], help="one job, or a table of recent jobs")
    p.add_argument("id", nargs="?", type=int)
    p.add_argument("--project")
    p.add_argument("--state", help="e.g. running or running,pending")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--events", action="store_true",
                   help="with a job id: its history, each event with its cause, who or what did it and why")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    client = client_for(args)
    if args.id is not None:
        job = client.get(f"{API}/jobs/{args.id}/")
        if args.events:
            job["events"] = list(client.paginate(f"{API}/jobs/{args.id}/events/", limit=1000))
        print_json(job) if args.json else print(job_lines(job))
        if args.events and not args.json:
            print("\nHistory:")
            print(table([[when(e["at"]), e["cause"], e["who"], _transition(e), e["text"]] for e in job["events"]],
                         ["WHEN", "CAUSE", "WHO", "STATE", "WHAT HAPPENED"]))
        return EXIT_OK
    if args.events:
        print("kakehashi: --events needs a job id (kakehashi status ID --events)", file=sys.stderr)
        return EXIT_USAGE
    page = client.get(f"{API}/jobs/", project=args.project, state=args.state, limit=args.limit)
    jobs = page["results"]
    if args.json:
        print_json(jobs)
        return EXIT_OK
    if not jobs:
        print("No jobs yet.")
        return EXIT_OK
    rows = [
        [str(j["id"]), j["state"], j["name"], j["project"], j.get("hardware") or j["cluster"], str(j["nodes"]),
         j["walltime"], _gpu(j), when(j.get("created_at")), money(j.get("cost") or j.get("estimate"))]
        for j in jobs
    ]
    print(table(rows, ["ID", "STATE", "NAME", "PROJECT", "HARDWARE", "NODES", "WALLTIME", "GPU", "CREATED",
                       "COST/EST."]))
    return EXIT_OK


def _gpu(job: dict) -> str:
    """What its GPUs do, as the list's badge says it: "idle", or the share of reserved GPU-hours used ("73 %");
    "-" before any sample (or for a server older than this client)."""
    if job.get("gpu_state") == "idle" and job["state"] == "running":
        return "idle"
    efficiency = job.get("gpu_efficiency")
    return "-" if efficiency is None else f"{efficiency * 100:.0f} %"


def _transition(event: dict) -> str:
    """"queued → submitting", or "" for an event that changed no state (a note)."""
    if event["from_state"] == event["to_state"]:
        return ""
    return f"{event['from_state'] or '∅'} → {event['to_state']}"
