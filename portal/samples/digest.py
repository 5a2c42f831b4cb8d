"""The weekly digest of GPU use (Princeton's weekly efficiency report, for everyone): each researcher is told what
their jobs of the last seven days used and left idle, and what that cost; each project's owners and admins, the
same for the project with the people and jobs that wasted most. Through `tell()` (topic "digest": bell and e-mail
as each person chose), once a week per person: a person told in the last six and a half days is not told again.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from portal.notifications.actions import Notice, tell
from portal.notifications.models import Kind, Notification
from portal.projects.models import Membership, Role
from portal.samples.models import JobSamples

WEEK = timedelta(days=7)
AGAIN_AFTER = timedelta(days=6, hours=12)
WORST = 3


@dataclass
class Tally:
    used: float = 0.0
    idle: float = 0.0
    reserved: float = 0.0
    cost: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    jobs: list[tuple[float, str, int, str]] = field(default_factory=list)  # (idle cost, unit, job id, name)

    def add(self, summary: dict, job_id: int, name: str) -> None:
        self.used += summary.get("gpu_hours_used") or 0
        self.idle += summary.get("gpu_hours_idle") or 0
        self.reserved += summary.get("gpu_hours_reserved") or 0
        unit = summary.get("unit") or ""
        self.cost[unit] += summary.get("idle_cost") or 0
        self.jobs.append((summary.get("idle_cost") or 0, unit, job_id, name))

    def sentence(self) -> str:
        costs = ", ".join(f"{amount:.2f} {unit}" for unit, amount in sorted(self.cost.items()) if amount) or "nothing"
        share = f" ({self.used / self.reserved:.0%} of the {self.reserved:.1f} reserved)" if self.reserved else ""
        return f"{self.used:.1f} GPU-hours used{share}, {self.idle:.1f} idle, costing {costs}"

    def worst(self) -> str:
        wasted = sorted((j for j in self.jobs if j[0] > 0), reverse=True)[:WORST]
        return "; ".join(f"#{job_id} {name}: {cost:.2f} {unit} idle" for cost, unit, job_id, name in wasted)


def send_weekly_digests(now=None) -> list[int]:
    """Tell everyone due a digest (researchers with sampled GPU jobs this week, and their projects' managers)."""
    now = now or timezone.now()
    since = now - WEEK
    rows = (JobSamples.objects.filter(Q(job__ended_at__gte=since) | Q(job__ended_at__isnull=True,
                                                                     job__started_at__isnull=False))
            .exclude(summary={}).select_related("job", "job__project", "job__user"))
    people: dict[int, Tally] = defaultdict(Tally)
    projects: dict[int, Tally] = defaultdict(Tally)
    by_person_in: dict[int, dict[str, Tally]] = defaultdict(lambda: defaultdict(Tally))
    slugs: dict[int, str] = {}
    for row in rows:
        if not row.summary.get("gpu_hours_reserved"):
            continue
        job = row.job
        people[job.user_id].add(row.summary, job.pk, job.name)
        projects[job.project_id].add(row.summary, job.pk, job.name)
        by_person_in[job.project_id][job.user.username].add(row.summary, job.pk, job.name)
        slugs[job.project_id] = job.project.slug
    told_lately = set(Notification.objects.filter(kind=Kind.DIGEST, created_at__gte=now - AGAIN_AFTER)
                      .values_list("user_id", flat=True))
    notices: dict[int, list[str]] = defaultdict(list)
    for user_id, tally in people.items():
        worst = tally.worst()
        notices[user_id].append(f"Your jobs: {tally.sentence()}." + (f" Most idle: {worst}." if worst else ""))
    managers = Membership.objects.filter(project_id__in=projects, role__in=[Role.OWNER, Role.ADMIN])
    for project_id, user_id in managers.values_list("project_id", "user_id"):
        tally = projects[project_id]
        names = sorted(by_person_in[project_id].items(), key=lambda item: -sum(item[1].cost.values()))[:WORST]
        who = "; ".join(f"{name}: {t.idle:.1f} GPU-hours idle" for name, t in names if t.idle)
        notices[user_id].append(f"Project {slugs[project_id]}: {tally.sentence()}." + (f" Most idle: {who}." if who
                                                                                       else ""))
    due = [user_id for user_id in notices if user_id not in told_lately]
    tell([Notice(user_id=user_id, kind=Kind.DIGEST, link="/jobs/",
                 text=f"Your week of GPUs: {people[user_id].sentence()}" if user_id in people
                 else "The week's GPU use of your projects",
                 details="\n".join(notices[user_id]) + "\n\nIdle GPU-hours are those whose every sample stayed below "
                                                       "the idle rule's threshold.")
          for user_id in due])
    return sorted(due)
