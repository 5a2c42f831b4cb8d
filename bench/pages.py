"""Pages at centre scale: 100,000 jobs across 1,000 projects and 2,000 users, read through the WSGI server.

A fresh PostgreSQL database is migrated and filled with a year of history (bulk COPY, a few tens of seconds):
projects of very different sizes (one large project of 12,000 jobs and 80 members, the others lognormal), each
with a budget (once or monthly) and its ledger (reserve; settle and release for the ended), every job's events
(queued → submitting → pending → running → its ending), some sweeps, an audit row per submit and notifications.
Most jobs ended; the newest 2 % are queued, pending, running or lost.

Then gunicorn serves the portal as docker-compose.yml's `web` service runs it (`portal.wsgi:application`, 3 sync
workers, the production profile, one database connection per request) and a real HTTP client (requests) signs
in through the login form as a researcher of the large project (a session cookie) and holds an API token. Each
case is requested BENCH_PAGES_ROUNDS times (BENCH_PAGES_ONLY=usage,dashboard: only the cases whose label holds one
of these words), the cases interleaved round by round so that noise spreads over
all of them; reported: p50, p95 and max wall time seen by the client, and the body size.

Run: `/work/main/.venv/bin/python -m bench.pages`. BENCH_PAGES_JOBS / _PROJECTS / _USERS change the size;
BENCH_PAGES_BEFORE=/path/to/another/checkout measures that checkout first on the same data (its migrations, then
this checkout's are applied on top: the "before" and "after" columns of one run). This checkout is measured
twice: with a database connection per request (DATABASE_CONN_MAX_AGE=0, as docker-compose ran before) and with
connections kept as docker-compose.yml now sets them; BENCH_KEEP_DB=1 keeps the
database for EXPLAIN ANALYZE (its name is printed). Results: printed and written to bench/results-pages.md
(BENCH_OUT to write elsewhere).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEFORE = os.environ.get("BENCH_PAGES_BEFORE", "")
JOBS = int(os.environ.get("BENCH_PAGES_JOBS", "100000"))
PROJECTS = int(os.environ.get("BENCH_PAGES_PROJECTS", "1000"))
USERS = int(os.environ.get("BENCH_PAGES_USERS", "2000"))
ROUNDS = int(os.environ.get("BENCH_PAGES_ROUNDS", "60"))
# Comma-separated words: only the cases whose label contains one of them are measured (e.g. "usage").
ONLY = [word.strip() for word in os.environ.get("BENCH_PAGES_ONLY", "").split(",") if word.strip()]
BIG_JOBS = int(os.environ.get("BENCH_PAGES_BIG_JOBS", str(max(JOBS * 12 // 100, 1))))
BIG_MEMBERS = 80
GOAL_MS = 150.0
PASSWORD = "bench-" + secrets.token_hex(8)
DB_NAME = f"bench_pages_{os.getpid()}"
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
PYTHON = sys.executable
GUNICORN = str(Path(sys.executable).with_name("gunicorn"))
VAR = Path(tempfile.mkdtemp(prefix="bench-pages-"))


def server_env(code: Path, **extra: str) -> dict[str, str]:
    """The web service's environment as docker-compose.yml sets it, pointed at the bench database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAKEHASHI_", "DJANGO_", "DATABASE", "CELERY"))}
    env.update({
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "KAKEHASHI_PROFILE": "production",
        "SECRET_KEY": "bench-pages-" + "k" * 20 + "0123456789abcdefghijklmnopqrstuvwxyz",
        "KAKEHASHI_ENCRYPTION_KEYS": "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVowMTIzNDU=",
        "DATABASE_URL": f"{PG}/{DB_NAME}",
        "DATABASE_CONN_MAX_AGE": "60",  # docker-compose.yml's
        "REDIS_URL": "redis://127.0.0.1:6379/3",
        "CACHE_KEY_PREFIX": DB_NAME,
        "CELERY_BROKER_URL": "redis://127.0.0.1:6379/3",
        "CELERY_TASK_DEFAULT_QUEUE": DB_NAME,
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SESSION_COOKIE_SECURE": "false",
        "CSRF_COOKIE_SECURE": "false",
        "SECURE_SSL_REDIRECT": "false",
        "SECURE_HSTS_SECONDS": "0",
        "KAKEHASHI_VAR_DIR": str(VAR / code.name),
        "KAKEHASHI_MEDIA_ROOT": str(VAR / "media"),
        "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend",
        "PYTHONPATH": str(code),
    })
    env.update(extra)
    return env


def manage(code: Path, *args: str) -> None:
    subprocess.run([PYTHON, "manage.py", *args], cwd=code, env=server_env(code), check=True)


def main() -> int:
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{DB_NAME}"')
    try:
        first = Path(BEFORE).resolve() if BEFORE else ROOT
        t = time.perf_counter()
        manage(first, "migrate", "--noinput", "-v0")
        print(f"migrated ({first.name}) in {time.perf_counter() - t:.1f} s", flush=True)
        os.environ.update(server_env(ROOT))
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        t = time.perf_counter()
        world = synthesise()
        print(f"synthesised {JOBS:,} jobs in {time.perf_counter() - t:.1f} s", flush=True)
        # (label, code, environment): a connection per request is how docker-compose ran before this branch set
        # DATABASE_CONN_MAX_AGE; both are measured so that the code's share and the connection's share show apart.
        per_request = {"DATABASE_CONN_MAX_AGE": "0"}
        runs = []
        if BEFORE:
            runs.append((f"{first.name}, a connection per request", measure(first, world, per_request)))
            t = time.perf_counter()
            manage(ROOT, "migrate", "--noinput", "-v0")
            print(f"migrated ({ROOT.name}) on the data in {time.perf_counter() - t:.1f} s", flush=True)
        runs.append((f"{ROOT.name}, a connection per request", measure(ROOT, world, per_request)))
        runs.append((f"{ROOT.name}, connections kept (compose)", measure(ROOT, world, {})))
        write_results(world, runs)
    finally:
        from django.db import connections

        try:
            connections.close_all()
        except Exception:  # noqa: BLE001 - Django may not have been set up
            pass
        if os.environ.get("BENCH_KEEP_DB"):
            print(f"kept database {DB_NAME}")
        else:
            with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{DB_NAME}" WITH (FORCE)')
    return 0


# ---------------------------------------------------------------------------------------------- the data


class World:
    """What the measurements need to know about the synthesised data."""

    researcher: str
    big_slug: str
    token: str
    job_ids: list[int]  # jobs of the big project to open, ended and active
    visible_ids: list[int]  # every job id the researcher sees, newest first
    counts: dict[str, int]


def copy_rows(model, columns: list[str], rows) -> int:
    """COPY `rows` (tuples in the order of `columns`, attnames) into `model`'s table; every other column gets its
    field's default (or NULL, or now for auto_now fields)."""
    from django.db import connection
    from django.db.models import JSONField
    from django.utils import timezone
    from psycopg import sql
    from psycopg.types.json import Jsonb

    fields = {f.attname: f for f in model._meta.concrete_fields}
    now = timezone.now()
    rest, constants = [], []
    for name, f in fields.items():
        if name in columns or f.primary_key:
            continue
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            value = now
        elif f.has_default():
            value = f.get_default()
        elif f.null:
            value = None
        elif f.get_internal_type() in ("CharField", "TextField", "SlugField"):
            value = ""
        else:
            raise ValueError(f"{model.__name__}.{name} needs a value")
        rest.append(f.column)
        constants.append(Jsonb(value) if isinstance(f, JSONField) else value)
    json_at = [i for i, c in enumerate(columns) if isinstance(fields[c], JSONField)]
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(model._meta.db_table),
        sql.SQL(", ").join(sql.Identifier(c) for c in [fields[c].column for c in columns] + rest))
    count = 0
    with connection.cursor() as cursor, cursor.cursor.copy(statement) as copy:
        for row in rows:
            if json_at:
                row = list(row)
                for i in json_at:
                    row[i] = Jsonb(row[i])
            copy.write_row((*row, *constants))
            count += 1
    return count


def reset_sequence(model) -> None:
    from django.core.management.color import no_style
    from django.db import connection

    with connection.cursor() as cursor:
        for statement in connection.ops.sequence_reset_sql(no_style(), [model]):
            cursor.execute(statement)


def synthesise() -> World:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.hashers import make_password
    from django.db import connection, transaction
    from django.utils import timezone

    from portal.api.tokens import issue_token
    from portal.audit.models import AuditEntry
    from portal.budgets.models import Budget, LedgerEntry, Period
    from portal.catalog.models import HardwareType
    from portal.clusters.models import Allocation, Cluster, Kind
    from portal.jobs.models import Job, JobEvent, JobGroup, JobState
    from portal.notifications.models import Notification
    from portal.projects.models import Membership, Project, Role

    rng = random.Random(17)
    User = get_user_model()
    # The job script's column: `rendered_script`, whose model attribute is `own_script` since decision 0024.
    SCRIPT_COLUMN = "own_script" if any(f.attname == "own_script" for f in Job._meta.fields) else "rendered_script"
    now = timezone.now()
    year_ago = now - timedelta(days=365)
    hashed = make_password(PASSWORD)
    with transaction.atomic():
        users = User.objects.bulk_create(
            User(username="alice" if i == 0 else f"user{i:04d}", email=f"u{i}@example.org", password=hashed,
                 date_joined=year_ago)
            for i in range(USERS))
        projects = Project.objects.bulk_create(
            Project(slug="big-lab" if i == 0 else f"lab-{i:04d}", name="Big lab" if i == 0 else f"Lab {i:04d}",
                    created_at=year_ago)
            for i in range(PROJECTS))
        clusters = [
            Cluster.objects.create(slug=slug, name=name, kind=kind, login_host="127.0.0.1", host_keys="unused")
            for slug, name, kind in (("tsubame", "TSUBAME", Kind.SGE), ("abci", "ABCI", Kind.PBS),
                                     ("campus", "Campus Slurm", Kind.SLURM))
        ]
        hardware = []
        for cluster in clusters:
            for slug, gpus, rate in (("cpu", 0, "0.1"), ("a100", 4, "2"), ("h100", 8, "5")):
                hardware.append(HardwareType.objects.create(
                    cluster=cluster, slug=f"{cluster.slug}-{slug}", name=f"{cluster.name} {slug}", gpu_model=slug,
                    gpus_per_node=gpus, cpus_per_node=32, max_nodes=8, rate=Decimal(rate), rate_unit="points"))
        # Members: the big project has BIG_MEMBERS, the others 3-8; alice is a member of the big one and of two
        # others, so her lists mix projects.
        members: dict[int, list[int]] = {}
        memberships = []
        for pi, project in enumerate(projects):
            size = BIG_MEMBERS if pi == 0 else rng.randint(3, 8)
            chosen = rng.sample(range(1, USERS), min(size, USERS - 1))
            if pi in (0, 1, 2):
                chosen = [0, *[u for u in chosen if u != 0]][:size]
            members[project.pk] = [users[u].pk for u in chosen]
            for k, u in enumerate(chosen):
                role = Role.OWNER if k == 1 or (k == 0 and u != 0) else Role.ADMIN if k == 2 else (
                    Role.VIEWER if k % 7 == 6 else Role.MEMBER)
                memberships.append(Membership(user=users[u], project=project, role=role))
        Membership.objects.bulk_create(memberships)
        budgets = Budget.objects.bulk_create(
            Budget(project=p, amount=Decimal("100000000"), unit="points",
                   period=Period.MONTHLY if i % 3 == 2 else Period.ONCE, strict=True)
            for i, p in enumerate(projects))
        budget_of = {b.project_id: b for b in budgets}
        allocations = []
        cluster_of: dict[int, list] = {}
        for i, p in enumerate(projects):
            chosen = clusters if i == 0 else rng.sample(clusters, rng.randint(1, 2))
            cluster_of[p.pk] = chosen
            allocations += [Allocation(project=p, cluster=c, group=f"g{i:04d}") for c in chosen]
        Allocation.objects.bulk_create(allocations)

    # Jobs per project: the big one BIG_JOBS, the others lognormal (a few busy, most quiet).
    weights = [rng.lognormvariate(0, 1.2) for _ in projects[1:]]
    rest = JOBS - BIG_JOBS
    per_project = [BIG_JOBS] + [int(rest * w / sum(weights)) for w in weights]
    per_project[1] += JOBS - sum(per_project)
    owner = [p.pk for p, n in zip(projects, per_project, strict=True) for _ in range(n)]
    rng.shuffle(owner)  # jobs of all projects interleave in time, as on a real site
    hw_by_cluster = {c.pk: [h for h in hardware if h.cluster_id == c.pk] for c in clusters}
    span = (now - timedelta(hours=2) - year_ago).total_seconds()
    active_from = int(JOBS * 0.98)
    finals = [JobState.COMPLETED] * 75 + [JobState.FAILED] * 12 + [JobState.CANCELLED] * 8 + [JobState.TIMED_OUT] * 5
    actives = [JobState.RUNNING] * 50 + [JobState.PENDING] * 35 + [JobState.QUEUED] * 10 + [JobState.LOST] * 5
    group_id = 0
    groups = []
    jobs, events, ledger, audit, notes = [], [], [], [], []
    ev_id = 0

    def event(job_id, src, dst, at, reason=""):
        nonlocal ev_id
        ev_id += 1
        events.append((ev_id, job_id, src, dst, at, reason))

    for i in range(JOBS):
        job_id = i + 1
        project_id = owner[i]
        user_id = rng.choice(members[project_id])
        cluster = rng.choice(cluster_of[project_id])
        hw = rng.choice(hw_by_cluster[cluster.pk])
        nodes = rng.choice((1, 1, 1, 2, 4))
        walltime = rng.choice((600, 3600, 4 * 3600, 24 * 3600))
        created = year_ago + timedelta(seconds=span * i / JOBS + rng.random() * 30)
        estimate = (hw.rate * nodes * walltime / 3600).quantize(Decimal("0.0001"))
        state = rng.choice(actives if i >= active_from else finals)
        if rng.random() < 0.1 and i < active_from:
            group_id += 1
            groups.append((group_id, project_id, user_id, f"sweep-{group_id}", created))
        submitted = created + timedelta(seconds=rng.randint(1, 20)) if state != JobState.QUEUED else None
        started = ended = elapsed = cost = exit_code = None
        if state in (JobState.RUNNING, JobState.LOST) or state in finals and state != JobState.CANCELLED or (
                state == JobState.CANCELLED and rng.random() < 0.5):
            started = submitted + timedelta(seconds=rng.randint(5, 3600))
        if state in finals:
            elapsed = 0 if started is None else (walltime if state == JobState.TIMED_OUT else rng.randint(30, walltime))
            ended = (started or submitted) + timedelta(seconds=elapsed)
            ended = min(ended, now - timedelta(minutes=5))
            cost = (hw.rate * nodes * elapsed / 3600).quantize(Decimal("0.0001"))
            exit_code = 0 if state == JobState.COMPLETED else (1 if state == JobState.FAILED else None)
        scheduler_id = str(4_000_000 + i) if submitted else ""
        name = f"train-{rng.choice(('resnet', 'bert', 'vit', 'llama', 'unet'))}-{i % 1000}"
        jobs.append((
            job_id, uuid.UUID(int=rng.getrandbits(128), version=4), project_id, user_id, cluster.pk, hw.pk,
            group_id if groups and groups[-1][4] == created else None, name, nodes, walltime,
            "python train.py --epochs 10\n",
            "#!/bin/bash\n" + "".join(f"#$ -l option{k}=value\n" for k in range(20)) + "python train.py --epochs 10\n",
            "qsub job.sh" if cluster.kind == Kind.SGE else "sbatch job.sh", f"kh-{job_id}", scheduler_id,
            f"kakehashi-jobs/{job_id}", f"u{user_id}", state, "", exit_code, created, ended or started or created,
            submitted, started, ended, elapsed, (ended or now) if submitted else None, estimate, "points", cost,
        ))
        event(job_id, "", JobState.QUEUED, created)
        if submitted:
            event(job_id, JobState.QUEUED, JobState.SUBMITTING, submitted)
            event(job_id, JobState.SUBMITTING, JobState.PENDING, submitted)
        if started:
            event(job_id, JobState.PENDING, JobState.RUNNING, started)
        if state == JobState.LOST:
            event(job_id, JobState.RUNNING, JobState.LOST, now - timedelta(minutes=10), "neither queue nor accounting")
        if ended:
            event(job_id, JobState.RUNNING if started else (JobState.PENDING if submitted else JobState.QUEUED),
                  state, ended, "" if state == JobState.COMPLETED else f"{state} by the scheduler")
        budget = budget_of[project_id]
        period = (created.date().replace(day=1) if budget.period == Period.MONTHLY else date(2000, 1, 1))
        ledger.append((budget.pk, job_id, "reserve", estimate, period, created, user_id, f"estimate for job {job_id}"))
        if ended:
            ledger.append((budget.pk, job_id, "settle", cost, period, ended, None, ""))
            ledger.append((budget.pk, job_id, "release", estimate, period, ended, None, ""))
            if rng.random() < 0.5:
                notes.append((user_id, job_id, "failed" if state in (JobState.FAILED, JobState.TIMED_OUT) else "ended",
                              f"Job {name} (#{job_id}) ended: {state}", ended,
                              ended + timedelta(hours=1) if ended < now - timedelta(days=3) else None))
        audit.append((created, user_id, "job.submit", project_id, "job", str(job_id), "10.0.0.1",
                      {"estimate": str(estimate)}))

    with transaction.atomic():
        copy_rows(JobGroup, ["id", "project_id", "user_id", "name", "created_at"], groups)
        copy_rows(Job, ["id", "uuid", "project_id", "user_id", "cluster_id", "hardware_id", "group_id", "name",
                        "nodes", "walltime_seconds", "script", SCRIPT_COLUMN, "submit_command", "scheduler_name",
                        "scheduler_id", "remote_dir", "account_username", "state", "state_reason", "exit_code",
                        "created_at", "updated_at", "submitted_at", "started_at", "ended_at", "elapsed_seconds",
                        "last_seen_at", "estimate_amount", "estimate_unit", "cost_amount"], jobs)
        copy_rows(JobEvent, ["id", "job_id", "from_state", "to_state", "at", "reason"], events)
        copy_rows(LedgerEntry, ["budget_id", "job_id", "kind", "amount", "period_start", "created_at", "actor_id",
                                "note"], ledger)
        copy_rows(AuditEntry, ["created_at", "actor_id", "action", "project_id", "target_type", "target_id", "ip",
                               "data"], audit)
        copy_rows(Notification, ["user_id", "job_id", "kind", "text", "created_at", "read_at"], notes)
        for model in (JobGroup, Job, JobEvent):
            reset_sequence(model)
        if any(f.name == "balance_period" for f in Budget._meta.fields):
            # The balance a budget row keeps (docs/decisions/0024): its current period's sums of the ledger.
            from portal.budgets.actions import period_start

            with connection.cursor() as cursor:
                cursor.execute("""
                    UPDATE budgets_budget AS b SET balance_period = s.p, reserved = s.r, spent = s.sp FROM (
                        SELECT x.id, x.p,
                               COALESCE(SUM(CASE l.kind WHEN 'reserve' THEN l.amount WHEN 'release' THEN -l.amount END), 0) r,
                               COALESCE(SUM(CASE WHEN l.kind IN ('settle', 'adjust') THEN l.amount END), 0) sp
                        FROM unnest(%s::bigint[], %s::date[]) AS x(id, p)
                        LEFT JOIN budgets_ledgerentry l ON l.budget_id = x.id AND l.period_start = x.p
                        GROUP BY x.id, x.p) AS s
                    WHERE b.id = s.id""", [[b.pk for b in budgets], [period_start(b) for b in budgets]])
    with connection.cursor() as cursor:  # what autovacuum would have done over a year of history
        cursor.execute("VACUUM ANALYZE")

    alice = users[0]
    _, token = issue_token(alice, name="bench", scopes=("read",))
    big = projects[0]
    mine = set(Membership.objects.filter(user=alice).values_list("project_id", flat=True))
    visible = [j[0] for j in reversed(jobs) if j[2] in mine]
    big_jobs = [j[0] for j in jobs if j[2] == big.pk]
    world = World()
    world.researcher, world.big_slug, world.token = alice.username, big.slug, token
    world.visible_ids = visible
    step = max(len(big_jobs) // 60, 1)
    world.job_ids = big_jobs[::step][:59] + big_jobs[-1:]
    world.counts = {"jobs": len(jobs), "events": len(events), "ledger entries": len(ledger), "audit entries": len(audit),
                    "notifications": len(notes), "sweeps": len(groups), "memberships": len(memberships),
                    "projects": len(projects), "users": len(users), "jobs of the big project": len(big_jobs),
                    "jobs the researcher sees": len(visible), "researcher's projects": len(mine)}
    return world


# ------------------------------------------------------------------------------------------- measuring


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cases(world: World) -> list[tuple[str, str, bool]]:
    """(label, path, with the API token rather than the session)."""
    v = world.visible_ids
    after = {n: v[n * 50 - 1] for n in (1, 20) if len(v) > n * 50}
    job_paths = [f"/jobs/{pk}/" for pk in world.job_ids]
    return [
        ("job list", "/jobs/", False),
        ("job list, page 2", f"/jobs/?after={after.get(1, '')}", False),
        ("job list, page 21", f"/jobs/?after={after.get(20, '')}", False),
        ("job list, project filter", f"/jobs/?project={world.big_slug}", False),
        ("job list, state=running", "/jobs/?state=running", False),
        ("job list, search", "/jobs/?q=bert", False),
        ("job page", job_paths, False),
        ("project page", f"/projects/{world.big_slug}/", False),
        ("usage page (project)", f"/projects/{world.big_slug}/usage/", False),
        ("usage page (your projects)", "/usage/", False),
        ("project list", "/projects/", False),
        ("dashboard", "/", False),
        ("notifications", "/notifications/", False),
        ("GET /api/v1/jobs/", "/api/v1/jobs/", True),
        ("GET /api/v1/jobs/, page 2", "/api/v1/jobs/?limit=50&offset=50", True),
        ("GET /api/v1/jobs/, page 21", "/api/v1/jobs/?limit=50&offset=1000", True),
        ("GET /api/v1/jobs/?project=&state=running", f"/api/v1/jobs/?project={world.big_slug}&state=running", True),
    ]


def measure(code: Path, world: World, extra: dict[str, str]) -> dict[str, dict]:
    import requests

    manage(code, "collectstatic", "--noinput", "-v0")
    port = free_port()
    log = open(VAR / f"gunicorn-{code.name}.log", "w")  # noqa: SIM115 - closed below
    server = subprocess.Popen([GUNICORN, "portal.wsgi:application", "--bind", f"127.0.0.1:{port}", "--workers", "3"],
                              cwd=code, env=server_env(code, **extra), stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if requests.get(f"{base}/healthz", timeout=10).status_code == 200:
                    break
            except requests.RequestException:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"gunicorn did not answer: {(VAR / f'gunicorn-{code.name}.log').read_text()[-2000:]}")
        browser = requests.Session()
        page = browser.get(f"{base}/accounts/login/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        signed_in = browser.post(f"{base}/accounts/login/", data={"login": world.researcher, "password": PASSWORD,
                                                                  "csrfmiddlewaretoken": csrf},
                                 headers={"Referer": f"{base}/accounts/login/"}, allow_redirects=False)
        assert signed_in.status_code == 302 and "sessionid" in browser.cookies, signed_in.text[:500]
        api = requests.Session()
        api.headers["Authorization"] = f"Bearer {world.token}"
        plan = [case for case in cases(world) if not ONLY or any(word in case[0] for word in ONLY)]
        times: dict[str, list[float]] = {label: [] for label, _, _ in plan}
        sizes: dict[str, int] = {}
        for round_ in range(ROUNDS + 3):  # three rounds to warm the workers (imports, template caches)
            for label, path, with_token in plan:
                url = base + (path[round_ % len(path)] if isinstance(path, list) else path)
                client = api if with_token else browser
                t = time.perf_counter()
                response = client.get(url, allow_redirects=False)
                elapsed = (time.perf_counter() - t) * 1000
                if response.status_code != 200:
                    raise RuntimeError(f"{label}: {url} answered {response.status_code}: {response.text[:300]}")
                if round_ >= 3:
                    times[label].append(elapsed)
                    sizes[label] = len(response.content)
        assert len(api.get(base + "/api/v1/jobs/").json()["results"]) == min(50, len(world.visible_ids))
        return {label: {"p50": percentile(t, 50), "p95": percentile(t, 95), "max": max(t), "bytes": sizes[label]}
                for label, t in times.items()}
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        log.close()


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(math.ceil(p / 100 * len(ordered)) - 1, 0)]


def write_results(world: World, runs: list[tuple[str, dict]]) -> None:
    load = os.getloadavg()
    lines = [
        f"Pages at centre scale, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
        + ", ".join(f"{n:,} {what}" for what, n in world.counts.items()) + ".",
        f"gunicorn `portal.wsgi:application`, 3 workers, production profile, PostgreSQL on loopback; requests "
        f"(a session cookie from the login form, or an API token); {ROUNDS} requests a case, interleaved; "
        f"2-core machine shared with other agents (load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}).",
        "",
    ]
    labels = list(runs[-1][1])
    lines += ["| page | " + " | ".join(f"{name}: p50 / p95 ms" for name, _ in runs) + " | p95 < 150 ms (last) |",
              "| --- |" + " --- |" * (len(runs) + 1)]
    for label in labels:
        cells = [f"{r[label]['p50']:.1f} / {r[label]['p95']:.1f}" if label in r else "—" for _, r in runs]
        met = "yes" if runs[-1][1][label]["p95"] < GOAL_MS else "no"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {met} |")
    lines += ["", "Bytes a response: " + ", ".join(f"{label} {r['bytes']:,}" for label, r in runs[-1][1].items()) + "."]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(os.environ.get("BENCH_OUT", ROOT / "bench" / "results-pages.md"))
    out.write_text(text)
    (VAR / "raw.json").write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    raise SystemExit(main())
