"""`kakehashi submit`: Submit a script or a notebook, or a sweep of them; --dry-run shows the script, the estimate and where else it could run."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from typing import Any

from kakehashi_cli.client import Client, ConnectionFailed
from kakehashi_cli.common import (
    API,
    EXIT_OK,
    Refused,
    UsageError,
    client_for,
    default_name,
    describe,
    money,
    pairs,
    parse_gpus,
    parse_value,
    print_json,
    print_places,
    table,
)


def add_parser(sub, common) -> None:
    p = sub.add_parser("submit", parents=[common], help="submit a script or a notebook (.ipynb)")
    p.add_argument("files", nargs="*", metavar="file",
                   help="a shell script, or a Jupyter notebook (.ipynb) to run with papermill; several scripts are "
                        "submitted together, all or none")
    p.add_argument("--many", metavar="FILE",
                   help="submit the jobs of a JSON list (each an object as POST /api/v1/jobs/ takes; the options "
                        "here are their defaults) in one request, all or none")
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
    p.set_defaults(func=run)


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
            f"project {args.project} may use: " + (", ".join(describe(hw) for hw in options) or "nothing yet")
        )
    model, count = parse_gpus(args.gpus)
    fits = [
        hw for hw in options
        if hw["gpus_per_node"] == count and (model is None or hw["gpu_model"].lower() == model.lower())
        and hw["max_nodes"] >= args.nodes
    ]
    if not fits:
        wanted = f"{count}×{(model or 'any GPU').upper()} per node" + (f" for {args.nodes} nodes" if args.nodes > 1 else "")
        raise Refused(
            f"no hardware of project {args.project} has {wanted}; it may use: "
            + (", ".join(describe(hw) for hw in options) or "nothing yet")
        )

    def price(hw: dict[str, Any]) -> float:
        # The API prices each node-hour in the project's budget unit; without a conversion it is unknown.
        value = hw.get("price_per_node_hour")
        return float(value["amount"]) if value else float("inf")

    return min(fits, key=lambda hw: (price(hw), hw["slug"]))["slug"]


def run(args: argparse.Namespace) -> int:
    if not args.project and not args.many:
        raise UsageError("give the project: --project SLUG (or set KAKEHASHI_PROJECT)")
    if args.many or len(args.files) > 1:
        return _submit_many(args)
    if not args.files:
        raise UsageError("give a script or a notebook to submit (or several, or --many FILE)")
    args.file = args.files[0]
    client = client_for(args)
    body = _body(args, _read(args.file), _pick_hardware(client, args))
    answer = _post(client, args, body)
    if "sweep" in body:
        answer = _whole_sweep(client, answer)
    if args.json:
        print_json(answer)
    elif "sweep" in body:
        _print_sweep(answer, args.dry_run)
    elif args.dry_run:
        _print_dry_run(answer)
    else:
        _print_submitted(answer)
    return EXIT_OK


def _submit_many(args: argparse.Namespace) -> int:
    """Several scripts, or --many FILE (a JSON list of job bodies, each as POST jobs/ takes one), submitted in one
    request: the portal records all of them or none (jobs/batch/)."""
    if args.sweep or args.param or args.dry_run or args.name or args.files and args.many:
        raise UsageError("several scripts or --many are submitted as they are: --sweep, -p, --dry-run and --name "
                         "are for one script, and --many replaces the script arguments")
    client = client_for(args)
    defaults: dict[str, Any] = {"nodes": args.nodes, "walltime": args.walltime, "launcher": args.launcher,
                                "env": pairs(args.env, "--env")}
    for key, value in (("project", args.project), ("software", args.software), ("datasets", args.data)):
        if value:
            defaults[key] = value
    if args.gpus or args.hardware or not args.many:  # scripts share a hardware: the one given, or the only one
        defaults["hardware"] = _pick_hardware(client, args)
    if args.many:
        try:
            with open(args.many, encoding="utf-8") as handle:
                listed = json.load(handle)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise UsageError(f"cannot read {args.many}: {exc}") from None
        if not isinstance(listed, list) or not all(isinstance(job, dict) for job in listed):
            raise UsageError(f"{args.many} must hold a JSON list of jobs, each an object as POST /api/v1/jobs/ takes")
        bodies = [{**defaults, **job} for job in listed]
    else:
        bodies = []
        for path in args.files:
            if path.endswith(".ipynb"):
                raise UsageError(f"{path}: several notebooks go one by one (kakehashi submit NOTEBOOK)")
            bodies.append({**defaults, "name": default_name(path), "script": _read(path)})
    if "hardware" not in defaults and any("hardware" not in body for body in bodies):
        raise UsageError("give the hardware: --hardware SLUG or --gpus MODEL:COUNT (or a hardware in each job)")
    answer = _post_to(client, args, f"{API}/jobs/batch/", {"jobs": bodies})
    if args.json:
        print_json(answer)
        return EXIT_OK
    verb = "Submitted" if answer.get("created") else "Already submitted (same idempotency key)"
    print(f"{verb} {len(answer['jobs'])} jobs.")
    rows = [[str(j["id"]), j["state"], j["name"], j["project"], j["hardware"] or j["cluster"], money(j.get("estimate"))]
            for j in answer["jobs"]]
    print(table(rows, ["ID", "STATE", "NAME", "PROJECT", "HARDWARE", "ESTIMATE"]))
    for warning in answer.get("warnings") or []:
        print(f"warning: {warning}", file=sys.stderr)
    return EXIT_OK


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None


def _body(args: argparse.Namespace, text: str, hardware: str | None) -> dict[str, Any]:
    """The API request for this command line: a script or a notebook, and a sweep if --sweep was given."""
    body: dict[str, Any] = {
        "project": args.project,
        "name": args.name or default_name(args.file),
        "hardware": hardware,
        "nodes": args.nodes,
        "walltime": args.walltime,
        "launcher": args.launcher,
        "env": pairs(args.env, "--env"),
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
        body["parameters"] = {key: parse_value(value) for key, value in pairs(args.param, "-p").items()}
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
    return body


def _post(client: Client, args: argparse.Namespace, body: dict[str, Any]) -> dict[str, Any]:
    return _post_to(client, args, f"{API}/sweeps/" if "sweep" in body else f"{API}/jobs/", body)


def _post_to(client: Client, args: argparse.Namespace, path: str, body: dict[str, Any]) -> dict[str, Any]:
    # One key per invocation: if the connection drops after the portal recorded the job(s), the retry below gets
    # the same ones back instead of submitting them again.
    key = args.idempotency_key or str(uuid.uuid4())
    for attempt in range(3):
        try:
            _, answer = client.post(path, body, headers={"Idempotency-Key": key})
            return answer
        except ConnectionFailed:
            if attempt == 2 or args.dry_run:
                raise
            time.sleep(2 * (attempt + 1))
    raise AssertionError("unreachable")


def _print_dry_run(answer: dict[str, Any]) -> None:
    print(answer["script"].rstrip("\n"))
    print(f"\n# dry run: nothing was submitted. Estimate: {money(answer.get('estimate'))}", end="")
    budget = answer.get("budget")
    if budget:
        text = budget.get("text") or budget
        print(f"; {text['available']} {budget['unit']} available, "
              f"{text['after']} after this job" + ("" if budget["fits"] else " — the budget would refuse it"), end="")
    print()
    if answer.get("places") is not None:
        print()
        print_places("# Where this job's shape can run, cheapest first (change --hardware/--nodes to move it):",
                     answer["places"])


def _print_submitted(answer: dict[str, Any]) -> None:
    verb = "Submitted" if answer.get("created") else "Already submitted (same idempotency key)"
    print(f"{verb} job {answer['id']} ({answer['name']}) in {answer['project']} on {answer['hardware'] or answer['cluster']}: "
          f"{answer['state']}. Estimate {money(answer.get('estimate'))}.")
    for warning in answer.get("warnings") or []:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"Follow it with: kakehashi logs {answer['id']} -f")


def _sweep(items: list[str] | None) -> dict[str, list[Any]]:
    """--sweep LR=0.1,0.01 --sweep BATCH=32,64 → {"LR": [0.1, 0.01], "BATCH": [32, 64]} (every combination runs)."""
    sweep: dict[str, list[Any]] = {}
    for name, values in pairs(items or [], "--sweep").items():
        parsed = [parse_value(v.strip()) for v in values.split(",") if v.strip()]
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
              f"estimate for all: {money(answer.get('estimate'))}")
        if answer.get("places") is not None:
            print()
            print_places("# Where each point's shape can run, cheapest first, a point's cost (change --hardware/--nodes "
                          "to move it):", answer["places"])
        return
    verb = "Submitted" if answer.get("created") else "Already submitted (same idempotency key)"
    print(f"{verb} sweep {answer['id']} ({answer['name']}): {len(answer['jobs'])} jobs {how}. "
          f"Estimate for all: {money(answer.get('estimate'))}.")
    rows = [[str(j["id"]), j["state"], j["name"], json.dumps(j["parameters"], sort_keys=True)] for j in answer["jobs"]]
    print(table(rows, ["ID", "STATE", "NAME", "PARAMETERS"]))
