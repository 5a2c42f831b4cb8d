"""Template context shared by every page."""

from portal.notifications.actions import unread

_SECTIONS = {"projects": "projects", "jobs": "jobs", "data": "data", "usage": "usage", "settings": "settings", "site": "site",
             "clusters": "clusters"}


def navigation(request) -> dict:
    first = request.path.strip("/").split("/", 1)[0]
    return {"nav": _SECTIONS.get(first, "projects" if first == "" else "")}


def notifications(request) -> dict:
    """How many unread notifications the bell shows, up to BELL_LIMIT (one indexed, bounded read rather than a
    COUNT over all of them: pages stay flat however much history a user has; nothing for anonymous pages)."""
    user = getattr(request, "user", None)
    if not getattr(user, "is_authenticated", False):
        return {}
    return {"unread_notifications": len(unread(user).values_list("pk", flat=True)[:BELL_LIMIT])}


BELL_LIMIT = 99
