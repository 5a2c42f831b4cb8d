"""One module per `kakehashi` command, like the API's views: each adds its own parser section (`add_parser(sub,
common)`) and runs it (`run(args) -> exit code`). The order here is the order of `kakehashi --help`."""

from kakehashi_cli.commands import (
    budget,
    cancel,
    datasets,
    hardware,
    keep,
    login,
    logs,
    outputs,
    places,
    projects,
    session,
    status,
    submit,
    upload,
)

BEFORE_FILES = [login, submit, outputs, status, logs, cancel, keep, upload, datasets]
AFTER_FILES = [budget, projects, places, session, hardware]
