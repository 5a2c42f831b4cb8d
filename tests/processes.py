"""The processes of this machine, read from /proc: the test cluster's nodes, `make run`'s stacks and the jobs they
start all run here, so a test asks /proc what is still running."""

from __future__ import annotations

from pathlib import Path


def live_processes() -> dict[int, tuple[int, str]]:
    """Every process that has not ended (zombies left out): pid -> (parent's pid, command line)."""
    found: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if fields[0] != "Z":
            found[int(entry.name)] = (int(fields[1]), command)
    return found


def descendants(pid: int) -> dict[int, str]:
    """Every live descendant of `pid` (pid -> command line): children, their children, and so on."""
    processes = live_processes()
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, command) in processes.items():
            if ppid == parent and child not in found:
                found[child] = command
                frontier.append(child)
    return found


def running(fragment: str) -> list[str]:
    """The command lines of the live processes that contain `fragment` (a job's sampler by its path, say)."""
    return [command for _, command in live_processes().values() if fragment in command]
