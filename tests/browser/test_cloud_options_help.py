"""A site admin adding an AWS Batch cluster reads, under the Options box, what each option means: where AWS's APIs
are (a moto server), which S3 the containers read, the Batch service role, and that USD needs a conversion."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_cluster_options_box_explains_the_cloud_options(page, live_server, make_user):
    make_user("root", staff=True).__class__.objects.filter(username="root").update(is_superuser=True)
    log_in(page, live_server.url, "root")
    page.goto(live_server.url + "/admin/clusters/cluster/add/")
    help_text = page.locator("#id_options_helptext")
    for words in ("endpoint_url", "a moto server", "s3_endpoint_url", "KAKEHASHI_S3_ENDPOINT_URL", "service_role",
                  "AWS Batch's service-linked role", "set a conversion from USD to each budget's unit",
                  "docs/guide/cloud-without-aws.md"):
        expect(help_text).to_contain_text(words)
