"""What every `kakehashi` command shares: exit codes, the two errors a command raises, the API client from the
saved login, and how answers are printed (tables, money as the pages show it, a job's lines, the comparison of
places). Each command lives in kakehashi_cli/commands/<name>.py with its own parser section."""

from __future__ import annotations

import argparse
import json
import os
import re
from typing import Any

from kakehashi_cli import config
from kakehashi_cli.client import Client

EXIT_OK, EXIT_USAGE, EXIT_REFUSED, EXIT_CONNECTION = 0, 2, 3, 4
FINAL_STATES = {"completed", "failed", "cancelled", "timed_out"}
API = "/api/v1"


class UsageError(Exception):
    """Something on this side is wrong: a missing file, a bad option value, no login yet."""


class Refused(Exception):
    """The portal's data does not allow what was asked (e.g. no hardware matches --gpus)."""


def client_for(args: argparse.Namespace) -> Client:
    settings = config.resolve()
    url, token = settings["url"], settings["token"]
    if not url or not token:
        raise UsageError("not logged in: run  kakehashi login --url https://portal.example --token kh_…  "
                         "(or set KAKEHASHI_URL and KAKEHASHI_TOKEN)")
    return Client(url, token, timeout=args.timeout)


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def when(value: str | None) -> str:
    # "2026-05-01T12:34:56.123456Z" -> "2026-05-01 12:34"
    return value.replace("T", " ")[:16] if value else "-"


def money(value: dict[str, str] | None) -> str:
    """An amount as the portal's pages show it (its `text`: one rule on both), else exactly as the API gave it."""
    if not value:
        return "-"
    return value.get("text") or f"{value['amount']} {value['unit']}"


def table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in [headers, *rows]]
    return "\n".join(lines)


def job_lines(job: dict[str, Any]) -> str:
    lines = [
        ("job", f"{job['id']}  {job['name']}"),
        ("state", job["state"] + (f"  ({job['state_reason']})" if job.get("state_reason") else "")),
        ("project", job["project"]),
        ("hardware", f"{job.get('hardware') or '-'} on {job['cluster']}, {job['nodes']} node(s)"),
        ("walltime", job["walltime"]),
        ("scheduler id", job.get("scheduler_id") or "-"),
        ("exit", job.get("exit_text") or ("-" if job.get("exit_code") is None else f"exit code {job['exit_code']}")),
        ("estimate", money(job.get("estimate"))),
        ("cost", money(job.get("cost"))),
        ("created", when(job.get("created_at"))),
        ("started", when(job.get("started_at"))),
        ("ended", when(job.get("ended_at"))),
    ]
    lines += gpu_lines(job.get("gpu"))
    if job.get("url"):
        lines.append(("page", job["url"]))
    return "\n".join(f"{key:>12}: {value}" for key, value in lines)


def gpu_lines(gpu: dict[str, Any] | None) -> list[tuple[str, str]]:
    """What the job's GPUs really do (the sampler's figures) and the idle rule that applies."""
    if not gpu:
        return []
    summary = gpu.get("summary") or {}
    lines = [("gpu use", gpu["state"].replace("_", " ") + (f"  ({gpu['why']})" if gpu.get("why") else ""))]
    if summary:
        efficiency = summary.get("efficiency")
        lines.append(("gpu-hours", f"{summary['gpu_hours_used']:.2f} used of {summary['gpu_hours_reserved']:.2f} "
                                   f"reserved" + (f" ({efficiency:.0%})" if efficiency is not None else "")
                      + f", {summary['gpu_hours_idle']:.2f} idle costing {summary['idle_cost']:.2f} "
                        f"{summary.get('unit', '')}"))
        per_gpu = ", ".join(f"{g['device']} {g['mean'] if g['mean'] is not None else '?'}%" for g in summary["gpus"])
        if per_gpu:
            lines.append(("mean per gpu", per_gpu))
    if gpu.get("keep_until"):
        lines.append(("kept", f"by {gpu['kept_by']} until {when(gpu['keep_until'])} ({gpu['keeps']} keep(s))"))
    lines.append(("idle rule", gpu["rule"]))
    return lines


def parse_value(text: str) -> Any:
    """-p values: JSON when they parse (3, 0.01, true, [1,2], "x"), plain strings otherwise."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def pairs(items: list[str], what: str) -> dict[str, str]:
    result = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{what} {item!r}: write NAME=VALUE")
        result[key] = value
    return result


def default_name(path: str) -> str:
    stem = os.path.splitext(os.path.basename(path))[0]
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-._")
    if not name or not name[0].isalpha():
        name = "job-" + name if name else "job"
    return name[:40]


def parse_gpus(text: str):
    model, sep, count = text.rpartition(":")
    if not sep:
        model, count = "", text
    try:
        number = int(count)
    except ValueError:
        raise UsageError(f"--gpus {text!r}: write MODEL:COUNT, e.g. a100:8 (or just a count: 8)") from None
    if number < 0:
        raise UsageError("--gpus: the count cannot be negative")
    return (model or None), number


def describe(hw: dict[str, Any]) -> str:
    gpus = f"{hw['gpus_per_node']}×{(hw['gpu_model'] or 'GPU').upper()}" if hw["gpus_per_node"] else f"{hw['cpus_per_node']} CPUs"
    price = hw.get("price_per_node_hour")
    cost = f", {money(price)}/node-h" if price else ""
    return f"{hw['slug']} ({gpus}, up to {hw['max_nodes']} node(s){cost})"


def print_places(heading: str, places: list[dict[str, Any]]) -> None:
    """The comparison before Run (`kakehashi places`, `submit --dry-run`): cost in the budget's unit and in the
    reporting unit, and how busy each place is now, in the API's order (where you can run first, then cheapest first);
    a place you cannot run at yet says what is missing."""
    print(heading)
    rows = [[p["cluster"], p["hardware"], f"{p['nodes']}×{p['gpus_per_node']}" if p["gpus_per_node"] else str(p["nodes"]),
             money(p["cost"]), money(p["reporting_cost"]),
             p["busy"] + (f" (you cannot run here yet: {p['missing']})" if p.get("missing") else "")] for p in places]
    print(table(rows, ["CLUSTER", "HARDWARE", "NODES", "COST", "REPORTED", "HOW BUSY NOW"]) if rows
          else "Nowhere: no hardware of this project can run it.")
