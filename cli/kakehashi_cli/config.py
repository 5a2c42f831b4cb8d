"""Where the portal's URL and the API token are kept: ~/.config/kakehashi/config.json, mode 600.

Precedence: KAKEHASHI_URL / KAKEHASHI_TOKEN in the environment, then the file. KAKEHASHI_CONFIG names another
file (one per portal, or a throw-away one in CI).
"""

from __future__ import annotations

import json
import os
import tempfile


def config_path() -> str:
    explicit = os.environ.get("KAKEHASHI_CONFIG")
    if explicit:
        return os.path.expanduser(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "kakehashi", "config.json")


def load() -> dict[str, str]:
    path = config_path()
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        data = {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}; run kakehashi login again") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a kakehashi configuration; run kakehashi login again")
    return {k: v for k, v in data.items() if isinstance(v, str)}


def resolve() -> dict[str, str | None]:
    saved = load()
    return {
        "url": os.environ.get("KAKEHASHI_URL") or saved.get("url"),
        "token": os.environ.get("KAKEHASHI_TOKEN") or saved.get("token"),
    }


def save(url: str, token: str) -> str:
    """Write the file readable by its owner only. Atomic: a crash never leaves half a token behind."""
    path = config_path()
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    # mkstemp creates the file with mode 600 before anything is written to it.
    fd, tmp = tempfile.mkstemp(prefix=".config-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump({"url": url, "token": token}, handle, indent=2)
            handle.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


class ConfigError(Exception):
    pass
