"""docker-compose.yml describes the whole stack coherently (no Docker engine runs here to start it)."""

from __future__ import annotations

import importlib
import json
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


def test_shared_storage_is_the_stacks_s3_service_reached_by_browsers_at_its_public_address(compose):
    env = compose["services"]["web"]["environment"]
    assert env["KAKEHASHI_S3_ENDPOINT_URL"] == "http://s3:8333"
    assert env["KAKEHASHI_S3_PUBLIC_URL"].endswith("localhost:8333}")
    assert re.fullmatch(r"\$\{S3_SECRET_KEY:\?.+\}", env["KAKEHASHI_S3_SECRET_ACCESS_KEY"])
    s3 = compose["services"]["s3"]
    assert s3["environment"]["AWS_SECRET_ACCESS_KEY"] == env["KAKEHASHI_S3_SECRET_ACCESS_KEY"]
    assert "8333:8333" in s3["ports"]
    dockerfile = (ROOT / s3["build"]["context"] / s3["build"]["dockerfile"]).read_text()
    assert "--require-hashes" in dockerfile and "requirements-seaweedfs.txt" in dockerfile and "weed mini" in dockerfile


def test_the_stack_includes_a_pseudo_hpc_centre_whose_host_keys_the_portal_can_pin(compose):
    cluster = compose["services"]["cluster"]
    dockerfile = (ROOT / cluster["build"]["context"] / cluster["build"]["dockerfile"]).read_text()
    assert "tests/cluster" in dockerfile and "install.sh" in dockerfile and "up.sh" in dockerfile
    assert any(v.startswith("cluster-state:/var/tmp/kakehashi-cluster") for v in cluster["volumes"])
    for name in PORTAL_SERVICES:
        assert "cluster-state:/cluster-state:ro" in compose["services"][name]["volumes"]
    # Compute nodes as network namespaces and containers (bubblewrap) need the right to make namespaces.
    assert cluster.get("privileged") is True
    # The harness listens beyond loopback only when told to (inside the container).
    assert "KAKEHASHI_CLUSTER_LISTEN=0.0.0.0" in dockerfile
    assert "ListenAddress ${KAKEHASHI_CLUSTER_LISTEN:-127.0.0.1}" in (ROOT / "tests/cluster/up.sh").read_text()


def _default(value: str) -> str:
    """The value compose uses when the variable is unset: ${NAME:-default} → default."""
    match = re.fullmatch(r"\$\{\w+:-(.*)\}", value)
    return match.group(1) if match else value


def test_the_stack_has_a_jupyterhub_whose_service_is_the_portal(compose):
    from urllib.parse import urlsplit

    from django.urls import reverse

    hub = compose["services"]["jupyterhub"]
    env, portal = hub["environment"], compose["services"]["web"]["environment"]
    # One secret and one callback, the same on both sides; the secret must be supplied, never defaulted.
    assert env["KAKEHASHI_HUB_API_TOKEN"] == portal["KAKEHASHI_HUB_API_TOKEN"]
    assert re.fullmatch(r"\$\{KAKEHASHI_HUB_API_TOKEN:\?.+\}", env["KAKEHASHI_HUB_API_TOKEN"])
    assert re.fullmatch(r"\$\{KAKEHASHI_HUB_SHARED_PASSWORD:\?.+\}", env["KAKEHASHI_HUB_SHARED_PASSWORD"])
    assert env["KAKEHASHI_HUB_CALLBACK_URL"] == portal["KAKEHASHI_HUB_CALLBACK_URL"]
    callback = urlsplit(_default(portal["KAKEHASHI_HUB_CALLBACK_URL"]))
    assert callback.path == reverse("jupyterhub_callback")
    assert callback.port == int(compose["services"]["web"]["ports"][0].split(":")[0])
    # The hub reaches the portal (proxy route, Lab servers) by its service name, and the portal accepts that host.
    assert env["KAKEHASHI_PORTAL_URL"] == "http://web:8000" and "0.0.0.0:8000" in compose["services"]["web"]["command"]
    assert "web" in _default(portal["ALLOWED_HOSTS"]).split(",")
    assert "web" in hub["depends_on"]  # the hub waits for its services at start
    # The portal reaches the hub's API through the hub's proxy; browsers through the published port.
    bind = urlsplit(env["KAKEHASHI_HUB_BIND_URL"])
    assert bind.hostname == "0.0.0.0" and f"{bind.port}:{bind.port}" in hub["ports"]
    assert portal["KAKEHASHI_HUB_API_URL"] == f"http://jupyterhub:{bind.port}/hub/api"
    assert urlsplit(_default(portal["KAKEHASHI_HUB_URL"])).port == bind.port
    assert any(v.startswith("hubdata:") for v in hub["volumes"])


def test_the_hub_image_pins_the_proxy_and_installs_the_lab_extension_without_building_it(compose):
    build = compose["services"]["jupyterhub"]["build"]
    dockerfile = (ROOT / build["context"] / build["dockerfile"]).read_text()
    assert "COPY jupyterhub/package.json jupyterhub/package-lock.json" in dockerfile and "npm ci" in dockerfile
    assert "pip install --no-cache-dir -r requirements.txt" in dockerfile
    assert "pip install --no-cache-dir ./kakehashi-lab" in dockerfile
    assert (ROOT / "jupyterhub/kakehashi-lab/kakehashi_lab/labextension/package.json").is_file()
    assert "jupyterhub_config.py" in dockerfile and "lab-settings" in dockerfile
    lock = json.loads((ROOT / "jupyterhub/package-lock.json").read_text())
    assert lock["packages"]["node_modules/configurable-http-proxy"]["version"] == "5.3.0"
    config = (ROOT / "jupyterhub/jupyterhub_config.py").read_text()
    for variable in compose["services"]["jupyterhub"]["environment"]:
        assert f'"{variable}"' in config, f"{variable} is set for the hub but jupyterhub_config.py never reads it"
