"""Managing a project's files from the command line: `files` (list), `mv`, `rm`, `mkdir`, `uploads` (unfinished
ones, `--abort`); `datasets --delete/--rename` live beside `datasets --add` in commands/datasets.py. Each is one API call
(portal/api/file_views.py); the portal checks roles and says what is in use."""

from __future__ import annotations

import argparse
import os
from typing import Any
from urllib.parse import quote

from kakehashi_cli.upload import size_text

API = "/api/v1"


def _project(args: argparse.Namespace) -> str:
    return quote(args.project, safe="")


def cmd_files(args: argparse.Namespace, client, print_json) -> int:
    items = list(client.paginate(f"{API}/projects/{_project(args)}/files/"))
    folders = client.get(f"{API}/projects/{_project(args)}/folders/")["folders"]
    if args.json:
        print_json({"files": items, "folders": folders})
        return 0
    if not items and not folders:
        print(f"Project {args.project} has no files yet: kakehashi upload PATH --project {args.project}")
        return 0
    empty = [f for f in folders if not any(i["path"].startswith(f + "/") for i in items)]
    for folder in empty:
        print(f"{folder + '/':<48} {'(empty folder)':>12}")
    for item in items:
        note = "  (verifying)" if item.get("state") == "verifying" else ""
        print(f"{item['path']:<48} {size_text(item['size']):>12}  {item['sha256'][:12]}…{note}")
    return 0


def cmd_mv(args: argparse.Namespace, client, print_json) -> int:
    _, answer = client.post(f"{API}/projects/{_project(args)}/files/move/",
                            {"source": args.source, "destination": args.destination})
    if args.json:
        print_json(answer)
    else:
        print(f"Moved {args.source} to {answer['path']} in {answer['project']} ({answer['files']} file(s)).")
    return 0


def cmd_rm(args: argparse.Namespace, client, print_json) -> int:
    _, answer = client.post(f"{API}/projects/{_project(args)}/files/delete/",
                            {"path": args.path, "recursive": args.recursive})
    if args.json:
        print_json(answer)
    else:
        print(f"Deleted {answer['path']}{'/' if args.recursive else ''} from {answer['project']} "
              f"({answer['files']} file(s), {size_text(answer['size'])}).")
    return 0


def cmd_mkdir(args: argparse.Namespace, client, print_json) -> int:
    _, answer = client.post(f"{API}/projects/{_project(args)}/folders/", {"path": args.path})
    if args.json:
        print_json(answer)
    else:
        print(f"Made folder {answer['path']}/ in {answer['project']}.")
    return 0


def cmd_uploads(args: argparse.Namespace, client, print_json) -> int:
    base = f"{API}/projects/{_project(args)}/uploads/"
    if args.abort:
        _, answer = client.request("DELETE", f"{base}{quote(args.abort, safe='')}/")
        if args.json:
            print_json(answer)
        else:
            print(f"Aborted the upload of {answer['path']} ({size_text(answer['size'])}) in {answer['project']}: "
                  "its space is free again.")
        return 0
    items: list[dict[str, Any]] = client.get(base)["results"]
    if args.json:
        print_json(items)
    elif not items:
        print(f"You have no unfinished uploads in {args.project}.")
    else:
        print(f"Unfinished uploads in {args.project} (each holds its size of the quota until finished or aborted; "
              "run the same upload again to resume, or --abort ID):")
        for item in items:
            print(f"{item['id']}  {item['path']:<40} {size_text(item['size']):>12}")
    return 0


def register(sub, common, wrap) -> None:
    """Add the file commands to the `kakehashi` parser; `wrap(fn)` gives each the client and the JSON printer."""
    project = {"default": os.environ.get("KAKEHASHI_PROJECT"), "help": "project slug ($KAKEHASHI_PROJECT)"}

    p = sub.add_parser("files", parents=[common], help="a project's files and folders")
    p.add_argument("project")
    p.set_defaults(func=wrap(cmd_files))

    p = sub.add_parser("mv", parents=[common], help="rename or move a file or a folder in a project")
    p.add_argument("source", help="a file or folder of the project")
    p.add_argument("destination", help="its new path (ending in / = into that folder)")
    p.add_argument("--project", required=not project["default"], **project)
    p.set_defaults(func=wrap(cmd_mv))

    p = sub.add_parser("rm", parents=[common], help="delete a file (or, with -r, a folder) of a project")
    p.add_argument("path")
    p.add_argument("-r", "--recursive", action="store_true", help="delete a folder and everything in it")
    p.add_argument("--project", required=not project["default"], **project)
    p.set_defaults(func=wrap(cmd_rm))

    p = sub.add_parser("mkdir", parents=[common], help="make a folder in a project")
    p.add_argument("path")
    p.add_argument("--project", required=not project["default"], **project)
    p.set_defaults(func=wrap(cmd_mkdir))

    p = sub.add_parser("uploads", parents=[common], help="your unfinished uploads in a project, or --abort one")
    p.add_argument("project")
    p.add_argument("--abort", metavar="ID", help="abort this upload: the store drops its parts, the quota is freed")
    p.set_defaults(func=wrap(cmd_uploads))
