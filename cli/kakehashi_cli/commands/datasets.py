"""`kakehashi datasets`: A project's datasets: list, --add, --rename, --delete."""

from __future__ import annotations

import argparse
import urllib.parse

from kakehashi_cli.common import (
    API,
    EXIT_OK,
    UsageError,
    client_for,
    print_json,
)
from kakehashi_cli.upload import size_text as _size


def add_parser(sub, common) -> None:
    p = sub.add_parser("datasets", parents=[common],
                       help="a project's datasets, or --add one (what jobs attach with --data)")
    p.add_argument("project")
    p.add_argument("--add", metavar="NAME", help="name a new dataset (letters, digits, '.', '_', '-')")
    p.add_argument("--path", help="with --add: a file of the project")
    p.add_argument("--prefix", help="with --add: a folder of the project (every file under it)")
    p.add_argument("--cluster", help="with --cluster-path: the cluster's slug")
    p.add_argument("--cluster-path", help="with --add: a path on the cluster inside the project's storage there, "
                                          "used in place (project admins)")
    p.add_argument("--delete", metavar="NAME", help="delete a dataset (its files stay)")
    p.add_argument("--rename", nargs=2, metavar=("NAME", "NEW_NAME"), help="rename a dataset")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    client = client_for(args)
    base = f"{API}/projects/{args.project}/datasets/"
    if args.delete:
        _, answer = client.request("DELETE", f"{base}{urllib.parse.quote(args.delete, safe='')}/")
        if args.json:
            print_json(answer)
        else:
            print(f"Deleted dataset {answer['name']} of {answer['project']} (its files stay).")
        return EXIT_OK
    if args.rename:
        old, new = args.rename
        _, answer = client.request("PATCH", f"{base}{urllib.parse.quote(old, safe='')}/", json_body={"name": new})
        if args.json:
            print_json(answer)
        else:
            print(f"Renamed dataset {old} of {answer['project']} to {answer['name']}: jobs attach it with --data "
                  f"{answer['name']} and read $KAKEHASHI_DATA/{answer['name']}.")
        return EXIT_OK
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
            print_json(made)
        else:
            state = "" if made["state"] == "ready" else f" ({made['state']}: a worker checks it on the cluster)"
            print(f"Dataset {made['name']} in {made['project']}: {made['source']}{state}. "
                  f"Jobs attach it with --data {made['name']} and read $KAKEHASHI_DATA/{made['name']}.")
        return EXIT_OK
    items = list(client.paginate(base))
    if args.json:
        print_json(items)
    elif not items:
        print(f"Project {args.project} has no datasets yet: kakehashi datasets {args.project} --add NAME --path FILE")
    else:
        for item in items:
            size = _size(item["size"]) if item.get("size") is not None else "—"
            why = f" ({item['reason']})" if item.get("reason") else ""
            print(f"{item['name']:<24} {item['state']:<9} {size:>10}  {item['source']}{why}")
    return EXIT_OK
