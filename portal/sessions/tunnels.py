"""Sessions reached through an SSH tunnel through the login node: the rules, as plain functions
(docs/decisions/0056).

A cluster whose compute nodes the hub's host cannot reach says so with the option `session_tunnel: true`. Then the
tunnel process (`manage.py session_tunnels`, portal/sessions/tunnel_keeper.py) holds, for every session of that
cluster whose server has reported its address and whose job has not ended, a port on its own host carried through
the login node, as the session's cluster account, to exactly that address; and the hub's proxy is given that port
as the session's server_url. Which tunnels to open and close is `plan`; which port a new one takes is
`candidate_ports`; what the hub is given is `server_url`; whether the site's pages must say the tunnel process is
not running is `tunnel_warning` (`tunnel_warnings` per cluster); what a second process says when it refuses to start
is `refusal`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from portal.sessions.models import SessionTunnel, TunnelHeartbeat

OPTION = "session_tunnel"
# The tunnel process is "not seen" once its last reconciliation began longer ago than this, or than three of its
# intervals if it reconciles more rarely: a process reconciling every second misses 30 before its sessions are said
# to be unreachable (a slow reconciliation, a database hiccup, are not an outage).
STALE_AFTER = timedelta(seconds=30)


def wants_tunnel(options: Mapping | None) -> bool:
    """Whether a cluster's options (Cluster.options) say the hub reaches its sessions through a tunnel. Only the
    JSON value true does: a site admin's "yes" or 1 is refused where options are checked (`check_option`)."""
    return (options or {}).get(OPTION) is True


def check_option(options: Mapping | None) -> str:
    """What is wrong with the cluster option, for the admin ("" if nothing)."""
    value = (options or {}).get(OPTION, False)
    if not isinstance(value, bool):
        return f"the cluster option {OPTION} is true or false, not {value!r}"
    return ""


@dataclass(frozen=True)
class Target:
    """Where a session's tunnel leads and as whom: fixed by the session's one report (host, port) and its job."""

    session_id: int
    cluster_id: int
    account_id: int | None
    host: str
    port: int


@dataclass(frozen=True)
class Plan:
    close: list[int]  # sessions whose held tunnel goes (ended, or no longer wanted)
    open: list[int]  # sessions whose tunnel is opened (new, or again after a restart)
    forget: list[int]  # sessions recorded with an open tunnel that is not wanted any more: recorded closed


def plan(wanted: Mapping[int, Target], held: Mapping[int, Target], recorded: Iterable[int]) -> Plan:
    """What one reconciliation does, from the tunnels wanted (the database), those this process holds and those
    recorded open (by this process, or by one before it that crashed). A held tunnel whose target differs from the
    wanted one is closed and opened again (a target never changes once reported; this keeps it so)."""
    close = sorted(k for k, target in held.items() if wanted.get(k) != target)
    open_ = sorted(k for k, target in wanted.items() if held.get(k) != target)
    forget = sorted(set(recorded) - set(wanted))
    return Plan(close=close, open=open_, forget=forget)


def port_range(text: str) -> range:
    """KAKEHASHI_SESSION_TUNNEL_PORTS: "first-last" (or one port) within 1-65535."""
    first, _, last = str(text).strip().partition("-")
    try:
        low, high = int(first), int(last or first)
    except ValueError:
        raise ValueError(f"KAKEHASHI_SESSION_TUNNEL_PORTS must be first-last, e.g. 20000-20999, not {text!r}") from None
    if not 1 <= low <= high <= 65535:
        raise ValueError(f"KAKEHASHI_SESSION_TUNNEL_PORTS must lie within 1-65535, first before last, not {text!r}")
    return range(low, high + 1)


def candidate_ports(ports: range, taken: Iterable[int], recorded: int | None = None) -> list[int]:
    """The ports a session's tunnel may listen on, in the order to try them. A tunnel recorded before (this session's,
    from a process that crashed) takes only its own port again: the hub's proxy routes to it, and a tunnel on another
    port would not be reached. A new one takes a port of the range that no open tunnel has (one another program holds
    fails to bind: the next is tried)."""
    if recorded is not None:
        return [recorded]
    busy = set(taken)
    return [port for port in ports if port not in busy]


def url_of(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def server_url(session) -> str:
    """Where the hub's proxy routes a session ("" until it can): the node's own address, or, on a cluster whose
    sessions are tunnelled, the tunnel's port on the tunnel process's host once it listens there."""
    if not wants_tunnel(session.job.cluster.options):
        return session.url
    if not session.url:
        return ""
    tunnel = SessionTunnel.objects.filter(session_id=session.pk, closed_at__isnull=True).first()
    return url_of(settings.KAKEHASHI_SESSION_TUNNEL_HOST, tunnel.port) if tunnel else ""


def _when(moment: datetime) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S %Z")


def keeper_running(seen_at: datetime | None, now: datetime, interval: float = 1.0) -> bool:
    """Whether the tunnel process was seen recently enough to count as running (STALE_AFTER)."""
    return seen_at is not None and now - seen_at <= max(STALE_AFTER, timedelta(seconds=3 * interval))


def tunnel_warning(cluster_name: str, seen_at: datetime | None, now: datetime, interval: float = 1.0) -> str:
    """What a page says about a cluster with the option when the tunnel process does not run ("" when it does):
    its sessions have no tunnel, so the hub cannot reach them."""
    if keeper_running(seen_at, now, interval):
        return ""
    since = "has never run" if seen_at is None else f"has not been seen since {_when(seen_at)}"
    return (f"Session tunnels: the tunnel process (manage.py session_tunnels) {since}; sessions on {cluster_name} "
            "cannot be reached")


def tunnel_warnings(clusters: Iterable, now: datetime | None = None) -> dict[int, str]:
    """Per cluster id, for those of `clusters` (Cluster rows) with the option: the warning, where there is one."""
    tunnelled = [c for c in clusters if wants_tunnel(c.options)]
    if not tunnelled:
        return {}
    beat = TunnelHeartbeat.objects.first()  # one row a site (the tunnel process's)
    now = now or timezone.now()
    seen_at, interval = (beat.seen_at, beat.interval) if beat else (None, 1.0)
    warnings = {c.pk: tunnel_warning(c.name, seen_at, now, interval) for c in tunnelled}
    return {pk: text for pk, text in warnings.items() if text}


def refusal(holder: TunnelHeartbeat | None, lost: bool = False) -> str:
    """What a second tunnel process says as it refuses to start (another holds the site's lock), or (`lost`) what
    one says as it stops, another having taken the lock while its own connection to the database was lost."""
    who = f" (pid {holder.pid} on {holder.host} since {_when(holder.started_at)})" if holder else ""
    if lost:
        return f"another session_tunnels process took the site's tunnels{who} while this one's lock was lost: stopping"
    return f"another session_tunnels process holds the site's tunnels{who}: stop it first"
