"""Template context shared by every page."""

_SECTIONS = {"projects": "projects", "jobs": "jobs", "data": "data", "usage": "usage", "settings": "settings", "site": "site",
             "clusters": "clusters"}


def navigation(request) -> dict:
    first = request.path.strip("/").split("/", 1)[0]
    return {"nav": _SECTIONS.get(first, "projects" if first == "" else "")}
