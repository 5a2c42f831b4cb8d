"""`kakehashi upload`: Upload a file or a folder to a project's storage: resumable, a folder's small files in batches."""

from __future__ import annotations

import argparse
import os

from kakehashi_cli.client import ApiError
from kakehashi_cli.common import (
    API,
    EXIT_OK,
    Refused,
    UsageError,
    client_for,
    print_json,
)
from kakehashi_cli.upload import (
    BATCH_MAX_FILE,
    BatchUnsupported,
    BatchUploader,
    Uploader,
    UploadFailed,
    files_to_upload,
)
from kakehashi_cli.upload import size_text as _size


def add_parser(sub, common) -> None:
    p = sub.add_parser("upload", parents=[common],
                       help="upload a file or a folder to a project's shared storage (resumable: run it again)")
    p.add_argument("path", help="the local file or folder")
    p.add_argument("--project", default=os.environ.get("KAKEHASHI_PROJECT"), required=not os.environ.get("KAKEHASHI_PROJECT"),
                   help="project slug ($KAKEHASHI_PROJECT)")
    p.add_argument("--dest", help="path in the project (default: the file's or folder's name; for a file, ending "
                                  "in / = into that folder)")
    p.add_argument("--overwrite", action="store_true", help="replace files already at those paths")
    p.add_argument("--parallel", type=int, default=4, help="parts sent at once (default 4)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not os.path.exists(args.path):
        raise UsageError(f"{args.path} does not exist")
    files = files_to_upload(args.path, args.dest)
    if not files:
        raise UsageError(f"{args.path} holds no files")
    client = client_for(args)
    uploader = Uploader(client, args.project, threads=args.parallel)
    results = []
    small = [(local, dest) for local, dest in files if os.path.getsize(local) <= BATCH_MAX_FILE]
    if os.path.isdir(args.path) and len(small) > 1:
        # A folder's small files many at once: signed and completed by the thousand, PUT 16 at a time.
        batch = BatchUploader(uploader)
        try:
            stored = batch.upload(small, overwrite=args.overwrite)
        except (BatchUnsupported, ApiError) as exc:
            if isinstance(exc, ApiError) and exc.code != "no_object_store":
                raise
            stored = None  # a portal without batches, or without an object store: one by one below
        except UploadFailed as exc:
            raise Refused(f"{exc}; run the same command again to send what is missing") from None
        if stored is not None:
            results += stored
            files = [(local, dest) for local, dest in files if os.path.getsize(local) > BATCH_MAX_FILE]
            if not args.json:
                sent = len(stored) - batch.present
                print(f"Uploaded {sent} file(s) ({_size(sum(f['size'] for f in stored if f.get('state') != 'present'))}) "
                      f"to {args.project}" + (f"; {batch.present} already there with the same SHA-256" if batch.present
                                              else "") + ".")
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
        print_json(results[0] if len(results) == 1 and not os.path.isdir(args.path) else results)
    return EXIT_OK
