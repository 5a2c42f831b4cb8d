"""A site admin can only make a cluster of a kind the portal has a backend for, and every such cluster renders."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from backends import REGISTRY
from backends.base import JobSpec, Resources
from portal.clusters.connect import renderer_for
from portal.clusters.models import Cluster

pytestmark = pytest.mark.django_db


def test_the_admin_offers_exactly_the_kinds_that_have_a_backend(admin_client):
    page = admin_client.get(reverse("admin:clusters_cluster_add")).content.decode()
    select = re.search(r'<select name="kind".*?</select>', page, re.S).group(0)
    offered = [value for value in re.findall(r'<option value="([^"]*)"', select) if value]
    assert offered == list(REGISTRY)
    assert "aws-batch" in offered


@pytest.mark.parametrize("kind", list(REGISTRY))
def test_a_cluster_of_every_offered_kind_renders_a_job_script(kind):
    cluster = Cluster.objects.create(slug=f"c-{kind}", name=kind, kind=kind)
    # A container image and an instance type: what a cloud kind needs, and what every scheduler accepts.
    spec = JobSpec(name="hello", payload="echo hi\n", walltime_seconds=60, container="docker://python:3.12",
                   resources=Resources(mapping={"instance_type": "g5.xlarge"}))
    script = renderer_for(cluster).render(spec)
    assert script.startswith("#!/bin/bash") and "payload.sh" in script
