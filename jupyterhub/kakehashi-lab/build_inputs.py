"""Which sources the committed Lab extension bundle was built from, so that a stale bundle is noticed.

The frontend (src/, style/, package.json, its lockfile, tsconfig.json) is built into kakehashi_lab/labextension/,
which is committed so that installing the package needs no node. Changing a source without rebuilding would ship
the old frontend without any error. `make lab-extension` rebuilds the bundle and then runs

    python jupyterhub/kakehashi-lab/build_inputs.py --write

which records, in kakehashi_lab/labextension/build-inputs.json, the SHA-256 of every source and of every file of the
bundle it produced. Without --write it checks the record (exit 1, naming the files that differ); so does
tests/hub/test_lab_extension_build.py. Standard library only: it runs without the portal's venv.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUNDLE = "kakehashi_lab/labextension"
RECORD = "build-inputs.json"  # inside the bundle: committed (and installed) with it
SOURCE_FILES = ("package.json", "package-lock.json", "tsconfig.json")
SOURCE_DIRS = ("src", "style")
REBUILD = "make lab-extension (at the repository's root), then commit jupyterhub/kakehashi-lab/kakehashi_lab/labextension/"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sources(root: Path = HERE) -> dict[str, str]:
    """{path relative to the package: SHA-256} of what the build reads."""
    files = [root / name for name in SOURCE_FILES]
    files += [p for d in SOURCE_DIRS for p in (root / d).rglob("*") if p.is_file() and not p.name.startswith(".")]
    return {p.relative_to(root).as_posix(): _sha256(p) for p in sorted(files) if p.is_file()}


def bundle(root: Path = HERE) -> dict[str, str]:
    """{path relative to the bundle: SHA-256} of what the build produced (the record itself left out)."""
    out = root / BUNDLE
    return {p.relative_to(out).as_posix(): _sha256(p) for p in sorted(out.rglob("*"))
            if p.is_file() and p.relative_to(out).as_posix() != RECORD}


def record(root: Path = HERE) -> dict:
    return {"about": "SHA-256 of the sources this bundle was built from and of the bundle's files; written by "
                     "build_inputs.py --write (make lab-extension), checked by tests/hub/test_lab_extension_build.py",
            "sources": sources(root), "bundle": bundle(root)}


def write(root: Path = HERE) -> Path:
    path = root / BUNDLE / RECORD
    path.write_text(json.dumps(record(root), indent=2, sort_keys=True) + "\n")
    return path


def _differences(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    return sorted({name for name in recorded.keys() | now.keys() if recorded.get(name) != now.get(name)})


def stale(root: Path = HERE) -> list[str]:
    """What makes the committed bundle stale, one sentence a problem; empty when it was built from these sources."""
    path = root / BUNDLE / RECORD
    if not path.is_file():
        return [f"{BUNDLE}/{RECORD} is missing: the bundle's sources were not recorded; run {REBUILD}"]
    saved = json.loads(path.read_text())
    problems = []
    if changed := _differences(saved.get("sources", {}), sources(root)):
        problems.append(f"changed since the bundle was built: {', '.join(changed)}; run {REBUILD}")
    if changed := _differences(saved.get("bundle", {}), bundle(root)):
        problems.append(f"the bundle's files are not the ones recorded with its build ({', '.join(f'{BUNDLE}/{c}' for c in changed)}): "
                        f"it was rebuilt or edited without `build_inputs.py --write`; run {REBUILD}")
    return problems


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        print(f"recorded the sources of the bundle in {write().relative_to(HERE)}")
        return 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    problems = stale()
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
