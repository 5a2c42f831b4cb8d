"""axe-core (vendored in tests/browser/vendor, see its README) run inside a Playwright page."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page

AXE_JS = (Path(__file__).parent / "vendor" / "axe.min.js").read_text(encoding="utf-8")

# WCAG 2.0/2.1 level A and AA: labels, accessible names, contrast, ARIA, language, link purpose, …
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
# axe files the landmark checks under "best-practice", not under a WCAG tag: ask for them by name.
LANDMARK_RULES = [
    "region", "landmark-one-main", "landmark-no-duplicate-main", "landmark-unique", "landmark-main-is-top-level",
    "landmark-banner-is-top-level", "landmark-contentinfo-is-top-level", "landmark-complementary-is-top-level",
    "landmark-no-duplicate-banner", "landmark-no-duplicate-contentinfo", "page-has-heading-one", "heading-order",
    "skip-link", "label-title-only", "empty-heading", "empty-table-header",
]


def axe_violations(page: Page) -> list[dict]:
    """The violations axe finds on the page as it is now (including content htmx put there)."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE_JS)
    options = {
        "runOnly": {"type": "tag", "values": TAGS},
        "rules": {rule: {"enabled": True} for rule in LANDMARK_RULES},
        "resultTypes": ["violations"],
    }
    result = page.evaluate("async (options) => await axe.run(document, options)", options)
    return result["violations"]


def describe(violations: list[dict]) -> str:
    lines = []
    for v in violations:
        lines.append(f"{v['id']} ({v['impact']}): {v['help']} — {v['helpUrl']}")
        for node in v["nodes"][:5]:
            lines.append(f"    {node['target']}: {node['failureSummary'].splitlines()[-1].strip() if node.get('failureSummary') else ''}")
            lines.append(f"      {node['html'][:200]}")
    return "\n".join(lines)


def check(page: Page, where: str, found: dict[str, str]) -> None:
    """Run axe; record what it finds under `where` (the test asserts once, with every page's findings)."""
    violations = axe_violations(page)
    if violations:
        found[where] = f"{page.url}\n{describe(violations)}"


def assert_no_violations(page: Page, where: str) -> None:
    found: dict[str, str] = {}
    check(page, where, found)
    assert not found, report(found)


def report(found: dict[str, str]) -> str:
    return "axe found accessibility violations:\n" + "\n".join(f"== {where}: {text}" for where, text in found.items())
