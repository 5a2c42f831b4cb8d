"""What holds for every file of the repository, whatever it is: a merge left half done is found here, not by the
newcomer whose `make vendor` stops on a `<<<<<<<` line (frontend/vendor.sh carried one for months)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The lines git writes around each side of a conflict it could not resolve.
CONFLICT = re.compile(rb"^(<{7} |>{7} )", re.MULTILINE)


def _conflicted(root: Path, paths: list[str]) -> list[str]:
    found = []
    for path in paths:
        try:
            data = (root / path).read_bytes()
        except (IsADirectoryError, FileNotFoundError):  # a submodule, or deleted and not yet staged
            continue
        if CONFLICT.search(data):
            found.append(path)
    return found


def test_no_file_of_the_repository_holds_the_markers_of_an_unresolved_merge():
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    paths = [p for p in tracked.decode().split("\0") if p]
    assert len(paths) > 100, "git ls-files listed too few files to be this repository"
    assert _conflicted(ROOT, paths) == []


def test_a_half_merged_file_is_named(tmp_path):
    (tmp_path / "ok.sh").write_text("echo fine\n# ======= a ruler, not a marker\n")
    (tmp_path / "half.sh").write_text("echo a\n<<<<<<< HEAD\necho b\n=======\necho c\n>>>>>>> 186ebed (theirs)\n")
    assert _conflicted(tmp_path, ["ok.sh", "half.sh"]) == ["half.sh"]
