"""`kakehashi outputs`: The files a job left in outputs/, or download one (checked against its size)."""

from __future__ import annotations

import argparse
import os
import sys

from kakehashi_cli.common import (
    API,
    EXIT_OK,
    Refused,
    client_for,
    print_json,
)
from kakehashi_cli.upload import size_text as _size


def add_parser(sub, common) -> None:
    p = sub.add_parser("outputs", parents=[common], help="the files a job left in outputs/, or download one")
    p.add_argument("id", type=int)
    p.add_argument("--get", metavar="PATH", help="download this file (its path as listed)")
    p.add_argument("-o", "--output", metavar="FILE", help="where to save it (default: its name, here)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    client = client_for(args)
    job = client.get(f"{API}/jobs/{args.id}/")
    outputs = job.get("outputs") or []
    if not args.get:
        if args.json:
            print_json(outputs)
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
        print_json({"path": args.get, "saved_as": destination, "size": written})
    else:
        print(f"Saved {args.get} ({_size(written)}) as {destination}.")
    return EXIT_OK
