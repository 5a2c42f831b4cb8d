"""docker-compose.yml describes the whole stack coherently (no Docker engine runs here to start it)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PORTAL_SERVICES = {"web", "worker", "beat"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_the_stack_has_web_worker_beat_postgres_and_redis(compose):
    assert {"web", "worker", "beat", "postgres", "redis"} <= set(compose["services"])


def test_every_service_has_an_image_or_a_buildable_context(compose):
    for name, service in compose["services"].items():
        assert "image" in service or "build" in service, name
        if "build" in service:
            context = service["build"] if isinstance(service["build"], str) else service["build"]["context"]
            dockerfile = "Dockerfile" if isinstance(service["build"], str) else service["build"].get("dockerfile", "Dockerfile")
            assert (ROOT / context / dockerfile).is_file(), f"{name}: no {dockerfile} in {context}"


def test_dependencies_name_existing_services_and_volumes_are_declared(compose):
    services = set(compose["services"])
    declared = set(compose.get("volumes") or {})
    for name, service in compose["services"].items():
        assert set(service.get("depends_on") or {}) <= services, name
        for volume in service.get("volumes") or []:
            source = volume.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in declared, f"{name} uses undeclared volume {source}"


def test_portal_services_share_one_environment_that_points_at_the_stack(compose):
    envs = [compose["services"][name]["environment"] for name in PORTAL_SERVICES]
    assert all(env == envs[0] for env in envs)
    env = envs[0]
    for variable in ("DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY", "KAKEHASHI_ENCRYPTION_KEYS", "REDIS_URL"):
        assert variable in env, variable
    assert env["KAKEHASHI_PROFILE"] == "production"
    assert "@postgres:5432/" in env["DATABASE_URL"]
    assert env["CELERY_BROKER_URL"].startswith("redis://redis:")
    # Secrets must be supplied, never defaulted: compose's ${VAR:?message} form.
    assert re.fullmatch(r"\$\{SECRET_KEY:\?.+\}", env["SECRET_KEY"])
    assert re.fullmatch(r"\$\{KAKEHASHI_ENCRYPTION_KEYS:\?.+\}", env["KAKEHASHI_ENCRYPTION_KEYS"])


def test_every_variable_the_stack_sets_is_one_the_settings_read(compose):
    settings_text = (ROOT / "portal" / "settings.py").read_text()
    env = compose["services"]["web"]["environment"]
    for variable in env:
        assert f'"{variable}"' in settings_text, f"{variable} is set in docker-compose.yml but never read"


def test_service_commands_start_modules_that_exist(compose):
    commands = {name: compose["services"][name]["command"] for name in PORTAL_SERVICES | {"migrate"}}
    assert commands["web"][0] == "gunicorn"
    module, _, attr = commands["web"][1].partition(":")
    assert hasattr(importlib.import_module(module), attr)
    for name in ("worker", "beat"):
        assert commands[name][:3] == ["celery", "-A", "workers"]
        assert commands[name][3] == name
    assert importlib.import_module("workers").app.main == "kakehashi"
    assert commands["migrate"][:3] == ["python", "manage.py", "migrate"]


def test_the_stack_includes_a_pseudo_hpc_centre_whose_host_keys_the_portal_can_pin(compose):
    cluster = compose["services"]["cluster"]
    dockerfile = (ROOT / cluster["build"]["context"] / cluster["build"]["dockerfile"]).read_text()
    assert "tests/cluster" in dockerfile and "install.sh" in dockerfile and "up.sh" in dockerfile
    assert any(v.startswith("cluster-state:/var/tmp/kakehashi-cluster") for v in cluster["volumes"])
    for name in PORTAL_SERVICES:
        assert "cluster-state:/cluster-state:ro" in compose["services"][name]["volumes"]
    # The harness listens beyond loopback only when told to (inside the container).
    assert "KAKEHASHI_CLUSTER_LISTEN=0.0.0.0" in dockerfile
    assert "ListenAddress ${KAKEHASHI_CLUSTER_LISTEN:-127.0.0.1}" in (ROOT / "tests/cluster/up.sh").read_text()
