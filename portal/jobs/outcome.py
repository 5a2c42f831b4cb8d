"""How a job's end is said, the same on the job page, the job list, the API (`exit_text`) and so the CLI: what
accounting recorded, an exit code and/or the signal that killed the job, never "exit code 0" for a killed job."""

from __future__ import annotations

import signal as signals


def signal_name(number: int) -> str:
    try:
        return f"signal {number} ({signals.Signals(number).name})"
    except ValueError:
        return f"signal {number}"


def exit_text(exit_code: int | None, signal: int | None) -> str:
    """"exit code 3"; "exit code 143 (128 + SIGTERM)", as a shell reports a child a signal killed; "killed by signal
    15 (SIGTERM)" when accounting names the signal; "" when nothing is recorded yet."""
    if signal:
        killed = f"killed by {signal_name(signal)}"
        return killed if not exit_code else f"exit code {exit_code}, {killed}"
    if exit_code is None:
        return ""
    if 128 < exit_code < 128 + 65:
        try:
            return f"exit code {exit_code} (128 + {signals.Signals(exit_code - 128).name})"
        except ValueError:
            pass
    return f"exit code {exit_code}"
