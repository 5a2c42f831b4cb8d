"""`kakehashi logs`: A job's output, followed until it has ended with -f."""

from __future__ import annotations

import argparse
import json
import sys
import time

from kakehashi_cli.common import (
    API,
    EXIT_OK,
    FINAL_STATES,
    client_for,
)


def add_parser(sub, common) -> None:
    p = sub.add_parser("logs", parents=[common], help="a job's output")
    p.add_argument("id", type=int)
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job has ended")
    p.add_argument("--stream", choices=["stdout", "stderr"], default="stdout")
    p.add_argument("--offset", type=int, default=0, help="start at this byte")
    p.add_argument("--final-wait", type=float, default=60.0, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    client = client_for(args)
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
