"""Every relative link in the repository's Markdown leads somewhere: the file or folder exists, and a `#anchor` is a
heading of its target as GitHub names it.

What a reader clicks on GitHub is what is checked: links and images of the rendered Markdown (markdown-it, the
CommonMark parser, with GitHub's tables), and `href`/`src` in raw HTML. External URLs (any scheme, or `//host`) are
not followed, nor are line anchors (`#L10`, `#L10-L20`: they name lines of code, whose file must still exist).
Vendored folders and `node_modules` are not the project's prose and are skipped. No database, no network.
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
# Folders that are not the project's prose: other people's files, installed packages, what runs leave behind (and
# hidden ones: .git, .venv, caches), except the hidden folders a repository keeps prose in.
SKIPPED_FOLDERS = {"node_modules", "vendor", "var", "test-artifacts", "__pycache__"}
HIDDEN_KEPT = {".github", ".ci"}
LINE_ANCHOR = re.compile(r"^L\d+(C\d+)?(-L\d+(C\d+)?)?$")
HTML_LINK = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']*)["']""", re.IGNORECASE)
HTML_ANCHOR = re.compile(r"""\b(?:id|name)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)

_parser = MarkdownIt("commonmark").enable("table")


@dataclass(frozen=True)
class DeadLink:
    file: str  # relative to the folder checked
    line: int
    target: str
    why: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.target} — {self.why}"


def github_slug(text: str) -> str:
    """A heading's anchor as GitHub makes it (github-slugger): lower case; letters, marks, decimal and letter
    numbers, `_`, `-` and spaces kept, every other character dropped; each space becomes `-`."""
    kept = []
    for char in text.lower():
        category = unicodedata.category(char)
        if char in " -" or category[0] in "LM" or category in ("Nd", "Nl", "Pc"):
            kept.append(char)
    return "".join(kept).replace(" ", "-")


def markdown_files(root: Path) -> list[Path]:
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(s for s in subfolders
                               if (s in HIDDEN_KEPT or not s.startswith(".")) and s not in SKIPPED_FOLDERS)
        found += [Path(folder) / name for name in sorted(files) if name.endswith(".md")]
    return found


def _inline_text(token) -> str:
    """The text a heading shows (what GitHub slugs): its words and code, without markup."""
    return "".join(child.content for child in token.children or [] if child.type in ("text", "code_inline"))


def anchors_of(path: Path) -> set[str]:
    """The anchors a Markdown file offers: each heading's slug (a repeated one gets -1, -2, …) and HTML ids."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    tokens = _parser.parse(path.read_text(encoding="utf-8"))
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            slug = github_slug(_inline_text(tokens[i + 1]))
            if slug in seen:
                seen[slug] += 1
                slug = f"{slug}-{seen[slug]}"
            seen.setdefault(slug, 0)
            anchors.add(slug)
        elif token.type in ("html_block", "inline"):
            html = token.content if token.type == "html_block" else "".join(
                child.content for child in token.children or [] if child.type == "html_inline")
            anchors.update(HTML_ANCHOR.findall(html))
    return anchors


def links_of(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link and image of a Markdown file, code blocks and code spans excluded."""
    links = []
    for token in _parser.parse(path.read_text(encoding="utf-8")):
        line = token.map[0] + 1 if token.map else 0
        if token.type == "html_block":
            links += [(line, target) for target in HTML_LINK.findall(token.content)]
        for child in token.children or []:
            if child.type in ("softbreak", "hardbreak"):
                line += 1  # a paragraph's next line
            elif child.type == "link_open":
                links.append((line, child.attrs.get("href", "")))
            elif child.type == "image":
                links.append((line, child.attrs.get("src", "")))
            elif child.type == "html_inline":
                links += [(line, target) for target in HTML_LINK.findall(child.content)]
    return links


def dead_links(root: Path) -> list[DeadLink]:
    anchors: dict[Path, set[str]] = {}
    dead = []
    for source in markdown_files(root):
        for line, target in links_of(source):
            parts = urlsplit(target)
            if parts.scheme or target.startswith("//"):
                continue  # a URL elsewhere: not followed
            path, anchor = unquote(parts.path), unquote(parts.fragment)
            if not path:
                resolved = source
            elif path.startswith("/"):
                resolved = root / path.lstrip("/")  # GitHub reads /x as the repository's root
            else:
                resolved = Path(os.path.normpath(source.parent / path))
            where = str(source.relative_to(root))
            if not resolved.exists():
                dead.append(DeadLink(where, line, target, "no such file or folder"))
                continue
            if not anchor or LINE_ANCHOR.match(anchor) or resolved.suffix != ".md" or not resolved.is_file():
                continue
            if resolved not in anchors:
                anchors[resolved] = anchors_of(resolved)
            if anchor not in anchors[resolved]:
                dead.append(DeadLink(where, line, target, f"no heading of {resolved.relative_to(root)} has that anchor"))
    return dead


def test_every_relative_link_and_anchor_in_the_repositorys_markdown_leads_somewhere():
    files = markdown_files(ROOT)
    assert ROOT / "README.md" in files and ROOT / "docs" / "guide" / "README.md" in files
    dead = dead_links(ROOT)
    assert not dead, "Dead links in the repository's Markdown:\n" + "\n".join(map(str, dead))


def test_a_missing_file_or_heading_is_named_with_its_line_and_vendored_folders_are_not_read(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(
        "# Jobs and sweeps\n\n## The job form\n\n## Notes\n\n## Notes\n\n### `make run`: one command\n")
    (tmp_path / "tool.py").write_text("print('hi')\n")
    for skipped in ("node_modules/pkg", "static/vendor/lib", ".venv/lib"):  # not the project's prose
        (tmp_path / skipped).mkdir(parents=True)
        (tmp_path / skipped / "README.md").write_text("[gone](nowhere.md)\n")
    (tmp_path / "README.md").write_text(
        "# Project\n\n"
        "[form](docs/guide.md#the-job-form) [second notes](docs/guide.md#notes-1) [make](docs/guide.md#make-run-one-command)\n"
        "[here](#project) [folder](docs/) [root](/tool.py) [line](tool.py#L1-L2) ![pic](docs/guide.md)\n"
        "[site](https://example.org/missing.md) [mail](mailto:a@example.org)\n"
        "\n"
        "[gone](docs/gone.md)\n"
        "[old anchor](docs/guide.md#the-form)\n"
        "[third notes](docs/guide.md#notes-2)\n"
        "\n"
        "| a | b |\n| --- | --- |\n| [in a table](#nowhere) | ![img](docs/pic.png) |\n"
        "\n"
        '<a href="docs/missing.html">raw</a>\n'
        "\n```\n[in a code block](not/checked.md)\n```\n"
        "Some `[code span](not/checked.md)` too.\n")

    dead = [(d.file, d.line, d.target) for d in dead_links(tmp_path)]

    assert dead == [
        ("README.md", 7, "docs/gone.md"),
        ("README.md", 8, "docs/guide.md#the-form"),
        ("README.md", 9, "docs/guide.md#notes-2"),
        ("README.md", 13, "#nowhere"),
        ("README.md", 13, "docs/pic.png"),
        ("README.md", 15, "docs/missing.html"),
    ]


def test_headings_are_named_by_githubs_rules():
    assert github_slug("How the pieces fit") == "how-the-pieces-fit"
    assert github_slug("The cloud: AWS Batch") == "the-cloud-aws-batch"
    assert github_slug("heading with a - dash") == "heading-with-a---dash"
    assert github_slug("heading with an _ underscore") == "heading-with-an-_-underscore"
    assert github_slug("exchange.bind_headers(exchange, routing [, bindCallback])") == (
        "exchangebind_headersexchange-routing--bindcallback")
    assert github_slug("😄 unicode emoji") == "-unicode-emoji"
    assert github_slug("Привет non-latin 你好") == "привет-non-latin-你好"
    assert github_slug("Kakehashi 架け橋") == "kakehashi-架け橋"
    assert github_slug("en–dash ½") == "endash-"
