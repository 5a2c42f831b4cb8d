"""When each session's JupyterLab was last used, as the hub says: the `last_activity` of the hub user's named
server in `GET {hub api}/users/<hub user>` (jupyterhub-singleuser reports its server's activity to the hub, and the
hub adds what its proxy saw). Asked with the service's token, one request per hub user per call, however many
sessions they have: the sample reader (portal/samples/fetch.py) calls it once a cycle for the sessions it judges.

Fail safe: a hub that cannot be asked, an answer it cannot read, a server it does not list or whose
`last_activity` is empty: that session's activity is not known, and the idle rule never finds it idle
(docs/decisions/0055).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime

from portal.hub import hubapi
from portal.sessions.models import Session

logger = logging.getLogger(__name__)


def parse_time(value) -> int | None:
    """The hub's ISO 8601 time ("2026-11-27T06:48:20.123456Z") as epoch seconds; None if it is not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # the hub's times are UTC
    return int(moment.timestamp())


def servers_activity(hub_user: str) -> dict[str, int]:
    """The last activity of each of `hub_user`'s servers the hub lists (epoch seconds); {} if it cannot be told."""
    try:
        model = hubapi.user_model(hub_user)
    except hubapi.HubUnavailable as exc:
        logger.info("the hub's activity of %s could not be read: %s", hub_user, exc)
        return {}
    if not isinstance(model, dict) or not isinstance(model.get("servers"), dict):
        return {}
    found = {}
    for name, server in model["servers"].items():
        if isinstance(server, dict) and (moment := parse_time(server.get("last_activity"))) is not None:
            found[name] = moment
    return found


def last_activity(job_ids: Iterable[int]) -> dict[int, int]:
    """job id → its session server's last activity on the hub (epoch seconds), for those of `job_ids` that are
    sessions whose activity the hub told; the others are left out (not known)."""
    job_ids = list(job_ids)
    if not job_ids or not hubapi.enabled():
        return {}
    by_user: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for job_id, hub_user, server_name in (Session.objects.filter(job_id__in=job_ids).order_by("job_id")
                                          .values_list("job_id", "hub_user", "server_name")):
        by_user[hub_user].append((job_id, server_name))
    found = {}
    for hub_user, sessions in sorted(by_user.items()):
        servers = servers_activity(hub_user)
        for job_id, server_name in sessions:
            if server_name in servers:
                found[job_id] = servers[server_name]
    return found
