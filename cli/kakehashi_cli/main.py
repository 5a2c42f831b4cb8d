"""kakehashi — submit and follow jobs on a Kakehashi portal.

Exit codes: 0 done, 2 wrong usage (or a local file that cannot be used), 3 the portal refused (the message says
why), 4 the portal could not be reached. Human output by default; --json prints the API's answers for scripts.

Why one module: the `kakehashi` command is one argparse parser whose subcommands share the helpers at the top
(the client, tables, money, job lines); the API client, the configuration and uploads are their own modules.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import sys
import time
import uuid
from typing import Any

from kakehashi_cli import __version__, config
from kakehashi_cli.client import ApiError, BadAddress, Client, ConnectionFailed
from kakehashi_cli.upload import Uploader, UploadFailed, files_to_upload
from kakehashi_cli.upload import size_text as _size

EXIT_OK, EXIT_USAGE, EXIT_REFUSED, EXIT_CONNECTION = 0, 2, 3, 4
FINAL_STATES = {"completed", "failed", "cancelled", "timed_out"}
API = "/api/v1"


class UsageError(Exception):
    """Something on this side is wrong: a missing file, a bad option value, no login yet."""


class Refused(Exception):
    """The portal's data does not allow what was asked (e.g. no hardware matches --gpus)."""


# ---------------------------------------------------------------------------------------------- helpers


def _client(args: argparse.Namespace) -> Client:
    settings = config.resolve()
    url, token = settings["url"], settings["token"]
    if not url or not token:
        raise UsageError("not logged in: run  kakehashi login --url https://portal.example --token kh_…  "
                         "(or set KAKEHASHI_URL and KAKEHASHI_TOKEN)")
    return Client(url, token, timeout=args.timeout)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def _when(value: str | None) -> str:
    # "2026-05-01T12:34:56.123456Z" -> "2026-05-01 12:34"
    return value.replace("T", " ")[:16] if value else "-"


def _money(value: dict[str, str] | None) -> str:
    """An amount as the portal's pages show it (its `text`: one rule on both), else exactly as the API gave it."""
    if not value:
        return "-"
    return value.get("text") or f"{value['amount']} {value['unit']}"


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(cell).ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in [headers, *rows]]
    return "\n".join(lines)


def _job_lines(job: dict[str, Any]) -> str:
    lines = [
        ("job", f"{job['id']}  {job['name']}"),
        ("state", job["state"] + (f"  ({job['state_reason']})" if job.get("state_reason") else "")),
        ("project", job["project"]),
        ("hardware", f"{job.get('hardware') or '-'} on {job['cluster']}, {job['nodes']} node(s)"),
        ("walltime", job["walltime"]),
        ("scheduler id", job.get("scheduler_id") or "-"),
        ("exit", job.get("exit_text") or ("-" if job.get("exit_code") is None else f"exit code {job['exit_code']}")),
        ("estimate", _money(job.get("estimate"))),
        ("cost", _money(job.get("cost"))),
        ("created", _when(job.get("created_at"))),
        ("started", _when(job.get("started_at"))),
        ("ended", _when(job.get("ended_at"))),
    ]
    if job.get("url"):
        lines.append(("page", job["url"]))
    return "\n".join(f"{key:>12}: {value}" for key, value in lines)


def _parse_value(text: str) -> Any:
    """-p values: JSON when they parse (3, 0.01, true, [1,2], "x"), plain strings otherwise."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _pairs(items: list[str], what: str) -> dict[str, str]:
    result = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"{what} {item!r}: write NAME=VALUE")
        result[key] = value
    return result


def _default_name(path: str) -> str:
    stem = os.path.splitext(os.path.basename(path))[0]
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-._")
    if not name or not name[0].isalpha():
        name = "job-" + name if name else "job"
    return name[:40]


# ---------------------------------------------------------------------------------------------- commands


def cmd_login(args: argparse.Namespace) -> int:
    url = args.url or os.environ.get("KAKEHASHI_URL") or config.load().get("url")
    if not url:
        raise UsageError("give the portal's address: kakehashi login --url https://portal.example --token kh_…")
    token = args.token or os.environ.get("KAKEHASHI_TOKEN")
    if not token:
        # Not on the command line by default: that would leave the token in the shell's history.
        token = getpass.getpass("API token: ") if sys.stdin.isatty() else sys.stdin.readline()
    token = token.strip()
    if not token:
        raise UsageError("no token given (create one under Settings → API tokens in the portal)")
    me = Client(url, token, timeout=args.timeout).get(f"{API}/me/")  # refuses a bad token before it is saved
    path = config.save(url.rstrip("/"), token)
    if args.json:
        _print_json({"url": url.rstrip("/"), "config": path, "user": me})
    else:
        scopes = ", ".join((me.get("token") or {}).get("scopes") or [])
        print(f"Logged in to {url.rstrip('/')} as {me['username']} (scopes: {scopes}). Saved to {path}.")
    return EXIT_OK


def _pick_hardware(client: Client, args: argparse.Namespace) -> str | None:
    """--hardware as given, or the cheapest hardware of the project matching --gpus MODEL:COUNT."""
    if args.hardware:
        return args.hardware
    options = list(client.paginate(f"{API}/hardware/", project=args.project))
    if not args.gpus:
        if len(options) == 1:
            return options[0]["slug"]
        raise UsageError(
            "choose the hardware with --gpus MODEL:COUNT (e.g. --gpus a100:8) or --hardware SLUG; "
            f"project {args.project} may use: " + (", ".join(_describe(hw) for hw in options) or "nothing yet")
        )
    model, count = _parse_gpus(args.gpus)
    fits = [
        hw for hw in options
        if hw["gpus_per_node"] == count and (model is None or hw["gpu_model"].lower() == model.lower())
        and hw["max_nodes"] >= args.nodes
    ]
    if not fits:
        wanted = f"{count}×{(model or 'any GPU').upper()} per node" + (f" for {args.nodes} nodes" if args.nodes > 1 else "")
        raise Refused(
            f"no hardware of project {args.project} has {wanted}; it may use: "
            + (", ".join(_describe(hw) for hw in options) or "nothing yet")
        )

    def price(hw: dict[str, Any]) -> float:
        # The API prices each node-hour in the project's budget unit; without a conversion it is unknown.
        value = hw.get("price_per_node_hour")
        return float(value["amount"]) if value else float("inf")

    return min(fits, key=lambda hw: (price(hw), hw["slug"]))["slug"]


def _parse_gpus(text: str):
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


def _describe(hw: dict[str, Any]) -> str:
    gpus = f"{hw['gpus_per_node']}×{(hw['gpu_model'] or 'GPU').upper()}" if hw["gpus_per_node"] else f"{hw['cpus_per_node']} CPUs"
    price = hw.get("price_per_node_hour")
    cost = f", {_money(price)}/node-h" if price else ""
    return f"{hw['slug']} ({gpus}, up to {hw['max_nodes']} node(s){cost})"


def cmd_submit(args: argparse.Namespace) -> int:
    if not args.project:
        raise UsageError("give the project: --project SLUG (or set KAKEHASHI_PROJECT)")
    try:
        with open(args.file, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {args.file}: {exc}") from None
    client = _client(args)
    body: dict[str, Any] = {
        "project": args.project,
        "name": args.name or _default_name(args.file),
        "hardware": _pick_hardware(client, args),
        "nodes": args.nodes,
        "walltime": args.walltime,
        "launcher": args.launcher,
        "env": _pairs(args.env, "--env"),
        "dry_run": args.dry_run,
    }
    if args.data:
        body["datasets"] = args.data
    if args.software:
        body["software"] = args.software
    if args.file.endswith(".ipynb"):
        try:
            body["notebook"] = json.loads(text)
        except ValueError as exc:
            raise UsageError(f"{args.file} is not a notebook (not valid JSON: {exc})") from None
        body["parameters"] = {key: _parse_value(value) for key, value in _pairs(args.param, "-p").items()}
    else:
        if args.param:
            raise UsageError("-p parameters are for notebooks (.ipynb); pass settings to a script with --env NAME=VALUE")
        body["script"] = text
    sweep = _sweep(args.sweep)
    if sweep:
        body["sweep"] = sweep
        body["array"] = args.array
    elif args.array is not None:
        raise UsageError("--array/--no-array say how a sweep is submitted: give the sweep with --sweep NAME=V1,V2")
    # One key per invocation: if the connection drops after the portal recorded the job, the retry below gets
    # that same job back instead of submitting a second one.
    key = args.idempotency_key or str(uuid.uuid4())
    for attempt in range(3):
        try:
            status, answer = client.post(f"{API}/sweeps/" if sweep else f"{API}/jobs/", body,
                                         headers={"Idempotency-Key": key})
            break
        except ConnectionFailed:
            if attempt == 2 or args.dry_run:
                raise
            time.sleep(2 * (attempt + 1))
    if sweep:
        answer = _whole_sweep(client, answer)
    if args.json:
        _print_json(answer)
    elif sweep:
        _print_sweep(answer, args.dry_run)
    elif args.dry_run:
        print(answer["script"].rstrip("\n"))
        print(f"\n# dry run: nothing was submitted. Estimate: {_money(answer.get('estimate'))}", end="")
        budget = answer.get("budget")
        if budget:
            text = budget.get("text") or budget
            print(f"; {text['available']} {budget['unit']} available, "
                  f"{text['after']} after this job" + ("" if budget["fits"] else " — the budget would refuse it"), end="")
        print()
        if answer.get("places") is not None:
            print()
            _print_places("# Where this job's shape can run, cheapest first (change --hardware/--nodes to move it):",
                          answer["places"])
    else:
        verb = "Submitted" if answer.get("created") else "Already submitted (same idempotency key)"
        print(f"{verb} job {answer['id']} ({answer['name']}) in {answer['project']} on {answer['hardware'] or answer['cluster']}: "
              f"{answer['state']}. Estimate {_money(answer.get('estimate'))}.")
        for warning in answer.get("warnings") or []:
            print(f"warning: {warning}", file=sys.stderr)
        print(f"Follow it with: kakehashi logs {answer['id']} -f")
    return EXIT_OK


def _sweep(items: list[str] | None) -> dict[str, list[Any]]:
    """--sweep LR=0.1,0.01 --sweep BATCH=32,64 → {"LR": [0.1, 0.01], "BATCH": [32, 64]} (every combination runs)."""
    sweep: dict[str, list[Any]] = {}
    for name, values in _pairs(items or [], "--sweep").items():
        parsed = [_parse_value(v.strip()) for v in values.split(",") if v.strip()]
        if not parsed:
            raise UsageError(f"--sweep {name}= needs values, e.g. --sweep {name}=0.1,0.01")
        sweep[name] = parsed
    return sweep


def _whole_sweep(client: Client, answer: dict[str, Any]) -> dict[str, Any]:
    """The sweep with every job: the portal answers a page of them (100 unless asked), `jobs_next` links the rest."""
    jobs = list(answer["jobs"])
    following = answer.get("jobs_next")  # a portal before sweeps were paged sent every job and no link
    while following:
        page = client.get(following)
        jobs.extend(page["jobs"])
        following = page.get("jobs_next")
    return {**answer, "jobs": jobs, "jobs_next": None, "jobs_previous": None}


def _print_sweep(answer: dict[str, Any], dry_run: bool) -> None:
    how = "as one scheduler array" if answer["array"] else "job by job"
    if dry_run:
        print(answer["script"].rstrip("\n"))
        print(f"\n# dry run: nothing was submitted. {len(answer['jobs'])} jobs, {how}; "
              f"estimate for all: {_money(answer.get('estimate'))}")
        if answer.get("places") is not None:
            print()
            _print_places("# Where each point's shape can run, cheapest first, a point's cost (change --hardware/--nodes "
                          "to move it):", answer["places"])
        return
    verb = "Submitted" if answer.get("created") else "Already submitted (same idempotency key)"
    print(f"{verb} sweep {answer['id']} ({answer['name']}): {len(answer['jobs'])} jobs {how}. "
          f"Estimate for all: {_money(answer.get('estimate'))}.")
    rows = [[str(j["id"]), j["state"], j["name"], json.dumps(j["parameters"], sort_keys=True)] for j in answer["jobs"]]
    print(_table(rows, ["ID", "STATE", "NAME", "PARAMETERS"]))


def cmd_status(args: argparse.Namespace) -> int:
    client = _client(args)
    if args.id is not None:
        job = client.get(f"{API}/jobs/{args.id}/")
        _print_json(job) if args.json else print(_job_lines(job))
        return EXIT_OK
    page = client.get(f"{API}/jobs/", project=args.project, state=args.state, limit=args.limit)
    jobs = page["results"]
    if args.json:
        _print_json(jobs)
        return EXIT_OK
    if not jobs:
        print("No jobs yet.")
        return EXIT_OK
    rows = [
        [str(j["id"]), j["state"], j["name"], j["project"], j.get("hardware") or j["cluster"], str(j["nodes"]),
         j["walltime"], _when(j.get("created_at")), _money(j.get("cost") or j.get("estimate"))]
        for j in jobs
    ]
    print(_table(rows, ["ID", "STATE", "NAME", "PROJECT", "HARDWARE", "NODES", "WALLTIME", "CREATED", "COST/EST."]))
    return EXIT_OK


def cmd_logs(args: argparse.Namespace) -> int:
    client = _client(args)
    offset, delay, quiet_since_end = args.offset, 1.0, None
    out = sys.stdout
    while True:
        chunk = client.get(f"{API}/jobs/{args.id}/logs/", stream=args.stream, offset=offset)
        if args.json:
            print(json.dumps(chunk, ensure_ascii=False), flush=True)
        elif chunk["data"]:
            out.write(chunk["data"])
            out.flush()
        offset = chunk["next_offset"]
        if chunk["complete"] or not args.follow:
            return EXIT_OK
        if chunk["data"]:
            delay, quiet_since_end = 0.2, None  # there may be more right away
        else:
            delay = min(max(delay, 0.5) * 1.5, 5.0)
            if chunk.get("job_state") in FINAL_STATES:
                # The job ended; its last output is copied to the portal by a worker shortly after.
                quiet_since_end = quiet_since_end or time.monotonic()
                if time.monotonic() - quiet_since_end > args.final_wait:
                    print(f"\nkakehashi: job {args.id} ended ({chunk['job_state']}) but the rest of its output has not "
                          "reached the portal yet; run this again later", file=sys.stderr)
                    return EXIT_OK
        time.sleep(delay)


def cmd_outputs(args: argparse.Namespace) -> int:
    client = _client(args)
    job = client.get(f"{API}/jobs/{args.id}/")
    outputs = job.get("outputs") or []
    if not args.get:
        if args.json:
            _print_json(outputs)
        elif not outputs:
            print(f"Job {job['id']} ({job['name']}, {job['state']}) has no outputs in the portal yet.")
        else:
            for item in outputs:
                where = "" if item.get("url") else "  (left on the cluster)"
                print(f"{_size(item['size']):>10}  {item['path']}{where}")
        for note in job.get("outputs_not_collected") or []:
            print(f"outputs: {note}", file=sys.stderr)
        return EXIT_OK
    wanted = next((item for item in outputs if item["path"] == args.get), None)
    if wanted is None:
        raise Refused(f"job {job['id']} has no output {args.get!r}; list them with: kakehashi outputs {job['id']}")
    if not wanted.get("url"):
        raise Refused(f"{args.get} stayed on the cluster (in the job's outputs/ directory)")
    destination = args.output or os.path.basename(args.get)
    written = client.download(wanted["url"], destination)
    if written != wanted["size"]:
        raise Refused(f"{args.get}: got {written} bytes, the job left {wanted['size']}; run the command again")
    if args.json:
        _print_json({"path": args.get, "saved_as": destination, "size": written})
    else:
        print(f"Saved {args.get} ({_size(written)}) as {destination}.")
    return EXIT_OK


def cmd_datasets(args: argparse.Namespace) -> int:
    client = _client(args)
    base = f"{API}/projects/{args.project}/datasets/"
    if args.add:
        sources = {"path": args.path, "prefix": args.prefix, "cluster_path": args.cluster_path}
        if sum(1 for v in sources.values() if v) != 1:
            raise UsageError("give exactly one of --path FILE, --prefix FOLDER or --cluster-path PATH (with --cluster)")
        if args.cluster_path and not args.cluster:
            raise UsageError("--cluster-path needs --cluster SLUG: the cluster the path is on")
        body = {"name": args.add, **{k: v for k, v in sources.items() if v}}
        if args.cluster:
            body["cluster"] = args.cluster
        _, made = client.post(base, body)
        if args.json:
            _print_json(made)
        else:
            state = "" if made["state"] == "ready" else f" ({made['state']}: a worker checks it on the cluster)"
            print(f"Dataset {made['name']} in {made['project']}: {made['source']}{state}. "
                  f"Jobs attach it with --data {made['name']} and read $KAKEHASHI_DATA/{made['name']}.")
        return EXIT_OK
    items = list(client.paginate(base))
    if args.json:
        _print_json(items)
    elif not items:
        print(f"Project {args.project} has no datasets yet: kakehashi datasets {args.project} --add NAME --path FILE")
    else:
        for item in items:
            size = _size(item["size"]) if item.get("size") is not None else "—"
            why = f" ({item['reason']})" if item.get("reason") else ""
            print(f"{item['name']:<24} {item['state']:<9} {size:>10}  {item['source']}{why}")
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    _, job = _client(args).request("POST", f"{API}/jobs/{args.id}/cancel/")
    if args.json:
        _print_json(job)
    elif job["state"] in FINAL_STATES:
        print(f"Job {job['id']} ({job['name']}) is {job['state']}.")
    else:
        print(f"Cancel requested for job {job['id']} ({job['name']}, {job['state']}); the scheduler will stop it shortly.")
    return EXIT_OK


def cmd_upload(args: argparse.Namespace) -> int:
    if not os.path.exists(args.path):
        raise UsageError(f"{args.path} does not exist")
    files = files_to_upload(args.path, args.dest)
    if not files:
        raise UsageError(f"{args.path} holds no files")
    client = _client(args)
    uploader = Uploader(client, args.project, threads=args.parallel)
    results = []
    for local, dest in files:
        try:
            stored = uploader.upload_file(local, dest, overwrite=args.overwrite)
            verb = "Resumed and uploaded" if uploader.resumed_parts else "Uploaded"
        except ApiError as exc:
            if exc.code != "no_object_store":
                raise
            # A portal without an object store (`make run`) takes files through itself.
            fields = {"path": dest, **({"overwrite": "true"} if args.overwrite else {})}
            status, stored = client.upload(f"{API}/projects/{args.project}/files/", local, fields)
            verb = "Uploaded" if status == 201 else "Replaced"
        except UploadFailed as exc:
            raise Refused(f"{dest}: {exc}; run the same command again to resume") from None
        results.append(stored)
        if not args.json:
            # A file of several parts is hashed whole in the store by a worker before jobs may use it.
            note = (" Its SHA-256 is being verified in the store: the Data page says when it is ready for jobs."
                    if stored.get("state") == "verifying" else "")
            print(f"{verb} {stored['path']} ({_size(stored['size'])}, sha256 {stored['sha256'][:16]}…) in "
                  f"{stored['project']}.{note}")
    if args.json:
        _print_json(results[0] if len(results) == 1 and not os.path.isdir(args.path) else results)
    return EXIT_OK


def cmd_budget(args: argparse.Namespace) -> int:
    budget = _client(args).get(f"{API}/projects/{args.project}/budget/")
    if args.json:
        _print_json(budget)
    elif budget["budget"] is None:
        print(f"Project {budget['project']} has no budget set: jobs are not limited by cost.")
    else:
        unit = budget["unit"]
        kind = "strict" if budget["strict"] else "soft"
        print(f"Project {budget['project']} ({kind} {budget['period']} budget since {budget['period_start']})")
        text = budget.get("text") or budget  # as the pages show it; exact from an older portal
        for key in ("budget", "spent", "reserved", "available"):
            print(f"{key:>10}: {text[key]:>12} {unit}")
    return EXIT_OK


def cmd_projects(args: argparse.Namespace) -> int:
    projects = list(_client(args).paginate(f"{API}/projects/"))
    if args.json:
        _print_json(projects)
    else:
        print(_table([[p["slug"], p["role"] or "-", p["name"]] for p in projects], ["PROJECT", "ROLE", "NAME"]))
    return EXIT_OK


def cmd_hardware(args: argparse.Namespace) -> int:
    hardware = list(_client(args).paginate(f"{API}/hardware/", project=args.project))
    if args.json:
        _print_json(hardware)
    else:
        print("\n".join(_describe(hw) for hw in hardware) or "No hardware available.")
    return EXIT_OK


def cmd_places(args: argparse.Namespace) -> int:
    """Every place the project may run this shape, cheapest first: the comparison the job form shows."""
    if not args.project:
        raise UsageError("give the project: --project SLUG (or set KAKEHASHI_PROJECT)")
    model, count = _parse_gpus(args.gpus)
    params = {"project": args.project, "gpus": f"{model}:{count}" if model else str(count), "nodes": args.nodes}
    params.update({"walltime": args.walltime} if args.walltime else {"hours": args.hours})
    answer = _client(args).get(f"{API}/places/", **params)
    if args.json:
        _print_json(answer)
        return EXIT_OK
    _print_places(f"Where {answer['shape']} can run, cheapest first:", answer["places"])
    return EXIT_OK


def _print_places(heading: str, places: list[dict[str, Any]]) -> None:
    """The comparison before Run (`kakehashi places`, `submit --dry-run`): cost in the budget's unit and in the
    reporting unit, and how busy each place is now, in the API's order (cheapest first)."""
    print(heading)
    rows = [[p["cluster"], p["hardware"], f"{p['nodes']}×{p['gpus_per_node']}" if p["gpus_per_node"] else str(p["nodes"]),
             _money(p["cost"]), _money(p["reporting_cost"]), p["busy"]] for p in places]
    print(_table(rows, ["CLUSTER", "HARDWARE", "NODES", "COST", "REPORTED", "HOW BUSY NOW"]) if rows
          else "Nowhere: no hardware of this project can run it.")


# ------------------------------------------------------------------------------------------------ parser


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: an option given before the command is not reset by the command's own default.
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the API's JSON answer")
    common.add_argument("--timeout", type=float, default=argparse.SUPPRESS, help="seconds to wait for the portal (60)")

    parser = argparse.ArgumentParser(
        prog="kakehashi", parents=[common],
        description="Run and follow jobs on a Kakehashi portal. Start with: kakehashi login --url URL",
        epilog="exit codes: 0 ok, 2 usage, 3 refused by the portal, 4 portal unreachable",
    )
    parser.add_argument("--version", action="version", version=f"kakehashi {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("login", parents=[common], help="save the portal's URL and your API token")
    p.add_argument("--url", help="the portal, e.g. https://kakehashi.example.ac.jp")
    p.add_argument("--token", help="an API token (kh_…); omit it to be asked (keeps it out of the shell history)")
    p.set_defaults(func=cmd_login)

    p = sub.add_parser("submit", parents=[common], help="submit a script or a notebook (.ipynb)")
    p.add_argument("file", help="a shell script, or a Jupyter notebook (.ipynb) to run with papermill")
    p.add_argument("--project", default=os.environ.get("KAKEHASHI_PROJECT"), help="project slug ($KAKEHASHI_PROJECT)")
    p.add_argument("--gpus", help="MODEL:COUNT per node, e.g. a100:8: the cheapest matching hardware is chosen")
    p.add_argument("--hardware", help="hardware slug (instead of --gpus)")
    p.add_argument("--software", help="software slug (container image or modules)")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--walltime", default="01:00:00", help="HH:MM:SS, 90m, 2h, 1d (default 01:00:00)")
    p.add_argument("--name", help="job name (default: from the file name)")
    p.add_argument("--launcher", choices=["script", "torchrun", "mpirun"], default="script")
    p.add_argument("--env", action="append", metavar="NAME=VALUE", help="environment variable for the job (repeatable)")
    p.add_argument("-p", "--param", action="append", metavar="NAME=VALUE",
                   help="notebook parameter; VALUE is JSON when it parses (0.01, 3, true), else a string")
    p.add_argument("--sweep", action="append", metavar="NAME=V1,V2,…",
                   help="a parameter sweep: a job per combination, each with NAME set (repeatable)")
    p.add_argument("--array", action=argparse.BooleanOptionalAction, default=None,
                   help="submit the sweep as one scheduler array (default: wherever the scheduler has arrays)")
    p.add_argument("--data", action="append", metavar="NAME",
                   help="a dataset of the project, read by the job at $KAKEHASHI_DATA/NAME (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="show the job script and the estimate; submit nothing")
    p.add_argument("--idempotency-key", help="repeat a submit safely: the same key never submits twice")
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("outputs", parents=[common], help="the files a job left in outputs/, or download one")
    p.add_argument("id", type=int)
    p.add_argument("--get", metavar="PATH", help="download this file (its path as listed)")
    p.add_argument("-o", "--output", metavar="FILE", help="where to save it (default: its name, here)")
    p.set_defaults(func=cmd_outputs)

    p = sub.add_parser("status", parents=[common], help="one job, or a table of recent jobs")
    p.add_argument("id", nargs="?", type=int)
    p.add_argument("--project")
    p.add_argument("--state", help="e.g. running or running,pending")
    p.add_argument("--limit", type=int, default=20)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("logs", parents=[common], help="a job's output")
    p.add_argument("id", type=int)
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job has ended")
    p.add_argument("--stream", choices=["stdout", "stderr"], default="stdout")
    p.add_argument("--offset", type=int, default=0, help="start at this byte")
    p.add_argument("--final-wait", type=float, default=60.0, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("cancel", parents=[common], help="cancel a job")
    p.add_argument("id", type=int)
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser("upload", parents=[common],
                       help="upload a file or a folder to a project's shared storage (resumable: run it again)")
    p.add_argument("path", help="the local file or folder")
    p.add_argument("--project", default=os.environ.get("KAKEHASHI_PROJECT"), required=not os.environ.get("KAKEHASHI_PROJECT"),
                   help="project slug ($KAKEHASHI_PROJECT)")
    p.add_argument("--dest", help="path in the project (default: the file's or folder's name; for a file, ending "
                                  "in / = into that folder)")
    p.add_argument("--overwrite", action="store_true", help="replace files already at those paths")
    p.add_argument("--parallel", type=int, default=4, help="parts sent at once (default 4)")
    p.set_defaults(func=cmd_upload)

    p = sub.add_parser("datasets", parents=[common],
                       help="a project's datasets, or --add one (what jobs attach with --data)")
    p.add_argument("project")
    p.add_argument("--add", metavar="NAME", help="name a new dataset (letters, digits, '.', '_', '-')")
    p.add_argument("--path", help="with --add: a file of the project")
    p.add_argument("--prefix", help="with --add: a folder of the project (every file under it)")
    p.add_argument("--cluster", help="with --cluster-path: the cluster's slug")
    p.add_argument("--cluster-path", help="with --add: a path on the cluster inside the project's storage there, "
                                          "used in place (project admins)")
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser("budget", parents=[common], help="a project's budget: spent, reserved, available")
    p.add_argument("project")
    p.set_defaults(func=cmd_budget)

    p = sub.add_parser("projects", parents=[common], help="your projects and roles")
    p.set_defaults(func=cmd_projects)

    p = sub.add_parser("places", parents=[common],
                       help="every place a shape may run (e.g. --gpus 8 --hours 2): cost and how busy, cheapest first")
    p.add_argument("--project", default=os.environ.get("KAKEHASHI_PROJECT"), help="project slug ($KAKEHASHI_PROJECT)")
    p.add_argument("--gpus", default="0", help="GPUs in all: 8, or MODEL:COUNT such as a100:8 (default 0: CPU)")
    p.add_argument("--hours", default="1", help="walltime in hours (default 1)")
    p.add_argument("--walltime", help="instead of --hours: HH:MM:SS, 90m, 2h")
    p.add_argument("--nodes", type=int, default=1, help="for a CPU job: how many nodes (default 1)")
    p.set_defaults(func=cmd_places)

    p = sub.add_parser("hardware", parents=[common], help="hardware you may use (cheapest first with --project)")
    p.add_argument("--project")
    p.set_defaults(func=cmd_hardware)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.json = getattr(args, "json", False)
    args.timeout = getattr(args, "timeout", 60.0)
    try:
        code = args.func(args)
    except (UsageError, BadAddress) as exc:
        print(f"kakehashi: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    except config.ConfigError as exc:
        print(f"kakehashi: {exc}", file=sys.stderr)
        code = EXIT_USAGE
    except Refused as exc:
        print(f"kakehashi: {exc}", file=sys.stderr)
        code = EXIT_REFUSED
    except ApiError as exc:
        hint = ""
        if exc.status == 401:
            hint = " (check the token, or run kakehashi login again)"
        field = f" [{exc.field}]" if exc.field else ""
        print(f"kakehashi: refused ({exc.status} {exc.code}){field}: {exc.detail}{hint}", file=sys.stderr)
        code = EXIT_REFUSED
    except ConnectionFailed as exc:
        print(f"kakehashi: {exc}", file=sys.stderr)
        code = EXIT_CONNECTION
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)


if __name__ == "__main__":
    main()
