"""A compiled read (portal/compiled.py) answers what its queryset answers: the same row as the same model, with its
related rows, annotations and field conversions (JSON, decimals, times), from one statement."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import Value
from django.test.utils import CaptureQueriesContext

from portal.catalog.models import HardwareType
from portal.compiled import CompiledRead

pytestmark = pytest.mark.django_db


def _fields(model) -> dict:
    return {f.attname: getattr(model, f.attname) for f in model._meta.concrete_fields}


def test_a_compiled_read_answers_the_querysets_model_with_its_related_row_and_annotations(local_site):
    hardware = HardwareType.objects.get(cluster=local_site.cluster)
    hardware.measured = {"bandwidth": {"GB/s": 1.5}}  # JSON and a decimal rate: converted as Django converts them
    hardware.save(update_fields=["measured"])
    def build(slug, cluster):
        return HardwareType.objects.filter(slug=slug, cluster_id=cluster).select_related("cluster").annotate(label=Value("x"))

    read = CompiledRead(build, slug=str, cluster=int)
    for _ in range(2):  # the second read sends the SQL compiled by the first
        with CaptureQueriesContext(connection) as sent:
            ours = read.first(slug=hardware.slug, cluster=hardware.cluster_id)
        django = build(hardware.slug, hardware.cluster_id).first()
        assert len(sent) == 1
        assert _fields(ours) == _fields(django) and ours.label == django.label == "x"
        assert ours.measured == {"bandwidth": {"GB/s": 1.5}} and ours.rate == django.rate
        assert _fields(ours.cluster) == _fields(django.cluster)
    assert read.first(slug="no-such-hardware", cluster=hardware.cluster_id) is None


def test_a_value_the_compiled_sql_cannot_carry_as_it_is_is_refused_when_first_used(local_site):
    read = CompiledRead(lambda name: HardwareType.objects.filter(name__contains=name), name=str)
    with pytest.raises(ValueError, match="not a plain parameter"):
        read.first(name="A100")
