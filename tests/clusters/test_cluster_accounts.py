"""Researchers link their own cluster accounts with a key the portal generates and keeps encrypted."""

from __future__ import annotations

import pytest
from django.db import connection
from django.urls import reverse

from portal.clusters.actions import verify_account
from portal.clusters.models import ClusterAccount
from portal.dev.loopback import install_public_key, register_clusters

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


def test_linking_an_account_shows_the_key_to_install_and_checks_the_login(client, local_site, test_cluster):
    register_clusters(test_cluster, local_site.project)
    client.force_login(local_site.alice)
    page = client.get(reverse("cluster-accounts")).content.decode()
    assert "Slurm (test cluster)" in page and "Create my key" in page
    client.post(reverse("cluster-account-link", args=["slurm-test"]), {"slurm-test-username": "alice"})
    account = ClusterAccount.objects.get(user=local_site.alice, cluster__slug="slurm-test")
    page = client.get(reverse("cluster-accounts")).content.decode()
    assert account.public_key in page and "authorized_keys" in page
    assert account.public_key.startswith("ssh-ed25519 ") and account.public_key.endswith("kakehashi:alice@slurm-test")

    # Before the researcher installs the key, the check says what is wrong.
    assert verify_account(account.pk) is False
    account.refresh_from_db()
    assert "refused the key for alice" in account.last_error and account.verified_at is None

    install_public_key("alice", account.public_key)  # what alice does on the login node
    assert verify_account(account.pk) is True
    account.refresh_from_db()
    assert account.verified_at is not None and account.last_error == ""
    assert "linked" in client.get(reverse("cluster-accounts")).content.decode()


def test_private_keys_are_encrypted_at_rest(local_site, test_cluster):
    from portal.clusters.actions import link_account

    clusters = register_clusters(test_cluster, local_site.project)
    account = link_account(clusters["slurm-test"], username="alice", user=local_site.alice)
    with connection.cursor() as cursor:
        cursor.execute("SELECT private_key_encrypted FROM clusters_clusteraccount WHERE id = %s", [account.pk])
        stored = cursor.fetchone()[0]
    assert "PRIVATE KEY" not in stored and stored.startswith("gAAAAA")  # a Fernet token
    assert account.private_key().startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert "PRIVATE" not in repr(account) and "PRIVATE" not in str(account)


def test_a_key_installed_for_another_user_does_not_link(local_site, test_cluster):
    from portal.clusters.actions import link_account

    clusters = register_clusters(test_cluster, local_site.project)
    account = link_account(clusters["slurm-test"], username="bob", user=local_site.alice)
    install_public_key("alice", account.public_key)  # installed in alice's account, but claims to be bob
    assert verify_account(account.pk) is False
    account.refresh_from_db()
    assert "refused the key for bob" in account.last_error


def test_only_clusters_of_your_projects_can_be_linked(client, local_site, test_cluster):
    register_clusters(test_cluster, local_site.project)
    client.force_login(local_site.mallory)  # project nlp has no allocation on the test clusters
    assert "Slurm (test cluster)" not in client.get(reverse("cluster-accounts")).content.decode()
    assert client.post(reverse("cluster-account-link", args=["slurm-test"]), {"slurm-test-username": "x"}).status_code == 404
    assert not ClusterAccount.objects.filter(user=local_site.mallory).exists()
