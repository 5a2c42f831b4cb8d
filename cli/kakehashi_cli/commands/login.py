"""`kakehashi login`: Save the portal's address and an API token (asked for, not taken from the command line by default)."""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from kakehashi_cli import config
from kakehashi_cli.client import Client
from kakehashi_cli.common import (
    API,
    EXIT_OK,
    UsageError,
    print_json,
)


def add_parser(sub, common) -> None:
    p = sub.add_parser("login", parents=[common], help="save the portal's URL and your API token")
    p.add_argument("--url", help="the portal, e.g. https://kakehashi.example.ac.jp")
    p.add_argument("--token", help="an API token (kh_…); omit it to be asked (keeps it out of the shell history)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
        print_json({"url": url.rstrip("/"), "config": path, "user": me})
    else:
        scopes = ", ".join((me.get("token") or {}).get("scopes") or [])
        print(f"Logged in to {url.rstrip('/')} as {me['username']} (scopes: {scopes}). Saved to {path}.")
    return EXIT_OK
