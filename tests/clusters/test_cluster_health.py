"""The cluster page: what the health beat collected from the real test cluster, and only your projects' clusters."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.django_db]


def test_the_beat_records_each_cluster_and_the_page_shows_queue_depth_free_nodes_and_a_silent_cluster(client, hpc_site):
    from portal.clusters.health import collect, collect_all
    from portal.clusters.models import ClusterHealth
    from portal.clusters.tasks import collect_cluster_health_task

    assert collect_cluster_health_task() == len(collect_all())  # every test cluster and the local one answer
    slurm = ClusterHealth.objects.get(cluster__slug="slurm-test")
    assert slurm.reachable and slurm.total_nodes == 2 and slurm.pending is not None
    pbs = hpc_site.clusters["pbs-test"]
    pbs.login_port = 1  # the login node stops answering
    pbs.save()
    assert collect(pbs).reachable is False
    client.force_login(hpc_site.alice)
    html = client.get("/clusters/").content.decode()
    row = html.split('data-cluster="pbs-test"')[1].split("</tr>")[0]
    assert "badge text-bg-danger" in row and "last answered" in row and "Last error" in row
    assert "of 2" in row  # the last figures are kept
    slurm_row = html.split('data-cluster="slurm-test"')[1].split("</tr>")[0]
    assert "text-bg-success" in slurm_row and "of 2</td>" in slurm_row


def test_a_researcher_sees_only_the_clusters_of_their_projects(client, hpc_site):
    from portal.clusters.health import collect_all

    collect_all()
    client.force_login(hpc_site.mallory)  # project nlp: the local cluster only
    html = client.get("/clusters/").content.decode()
    assert 'data-cluster="local"' in html and "slurm-test" not in html and "Slurm" not in html
