"""Local accounts through django-allauth; a site admin can close sign-up."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from portal.accounts.models import SiteSettings

pytestmark = pytest.mark.django_db


def _sign_up(client, username: str):
    return client.post(reverse("account_signup"), {
        "username": username, "email": f"{username}@example.org", "password1": "a-long-passphrase-42",
        "password2": "a-long-passphrase-42",
    })


def test_anyone_can_sign_up_while_it_is_open(client):
    response = _sign_up(client, "newcomer")
    assert response.status_code == 302
    assert get_user_model().objects.filter(username="newcomer").exists()


def test_an_admin_can_close_sign_up(client):
    settings_row = SiteSettings.current()
    settings_row.signup_open = False
    settings_row.save()
    page = client.get(reverse("account_signup"))
    assert "Sign Up Closed" in page.content.decode()
    _sign_up(client, "latecomer")
    assert not get_user_model().objects.filter(username="latecomer").exists()


def test_pages_need_a_login(client):
    for name in ("dashboard", "job-list", "job-new", "project-list", "site-usage", "cluster-accounts"):
        response = client.get(reverse(name))
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/"), name
