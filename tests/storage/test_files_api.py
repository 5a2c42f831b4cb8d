"""Project files kept on the portal's own disk (`make run`, no object store): upload through the portal, list,
download; paths, sizes and the quota checked. Direct uploads to an object store: test_uploads.py."""

from __future__ import annotations

import hashlib

import pytest
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile

from portal.projects.models import Membership, Role
from portal.storage.actions import StorageError, clean_path
from portal.storage.models import StoredFile

pytestmark = pytest.mark.django_db

FILES = "/api/v1/projects/vision/files/"


pytestmark = [pytestmark, pytest.mark.usefixtures("filesystem_storage")]

def _upload(api, content: bytes = b"a,b\n1,2\n", name: str = "train.csv", url: str = FILES, **fields):
    return api.upload(url, {"file": SimpleUploadedFile(name, content), **fields})


def test_upload_list_and_download(alice_api, media_root):
    content = b"a,b\n1,2\n"
    response = _upload(alice_api, content, path="data/train.csv")
    assert response.status_code == 201, response.content
    stored = response.json()
    assert stored["path"] == "data/train.csv" and stored["size"] == len(content) and stored["project"] == "vision"
    assert stored["sha256"] == hashlib.sha256(content).hexdigest() and stored["uploaded_by"] == "alice"
    row = StoredFile.objects.get()
    assert row.storage_name == "projects/vision/data/train.csv"
    assert (media_root / "projects/vision/data/train.csv").read_bytes() == content

    listing = alice_api.get(FILES).json()
    assert [f["path"] for f in listing["results"]] == ["data/train.csv"]
    download = alice_api.get(f"{FILES}{row.pk}/download/")
    assert download.status_code == 200
    assert b"".join(download.streaming_content) == content
    assert 'attachment; filename="train.csv"' in download["Content-Disposition"]
    assert download["X-Checksum-SHA256"] == stored["sha256"]
    assert stored["download_url"].endswith(f"{FILES}{row.pk}/download/")


def test_the_files_name_is_the_default_path_and_a_folder_path_keeps_it(alice_api):
    assert _upload(alice_api, name="notes.txt").json()["path"] == "notes.txt"
    assert _upload(alice_api, name="notes.txt", path="docs/").json()["path"] == "docs/notes.txt"


def test_an_existing_path_is_replaced_only_with_overwrite(alice_api, media_root, django_capture_on_commit_callbacks):
    assert _upload(alice_api, b"one", path="x.txt").status_code == 201
    refused = _upload(alice_api, b"two", path="x.txt")
    assert refused.status_code == 409 and refused.json()["code"] == "exists"
    with django_capture_on_commit_callbacks(execute=True):
        replaced = _upload(alice_api, b"three", path="x.txt", overwrite="true")
    assert replaced.status_code == 200 and replaced.json()["size"] == 5
    row = StoredFile.objects.get()
    with default_storage.open(row.storage_name) as handle:
        assert handle.read() == b"three"
    # The replaced bytes are gone: one file in the project's folder.
    assert [p.name for p in (media_root / "projects/vision").iterdir()] == [row.storage_name.rsplit("/", 1)[-1]]


@pytest.mark.parametrize(
    "path",
    ["../escape.txt", "data/../../etc/passwd", "/etc/passwd", "a//b", "./x", "a\\b", "a\nb", "a\x00b", "x" * 600,
     "a/" + "b" * 300, "$(reboot)", "-rf", "data/ x", "C:/windows", "a`b`"],
)
def test_unsafe_paths_are_refused(alice_api, path, media_root):
    response = _upload(alice_api, path=path)
    assert response.status_code == 400, (path, response.content)
    assert response.json()["field"] == "path" and response.json()["detail"]
    assert StoredFile.objects.count() == 0
    assert not (media_root / "projects").exists() or not any((media_root / "projects").rglob("*.*"))


@pytest.mark.parametrize("path", ["data/train.csv", "results (v2)/model.pt", "日本語/データ.txt", ".env", "a-b_c+d=e@f,g"])
def test_ordinary_paths_are_accepted(path):
    assert clean_path(path) == path


def test_a_path_error_names_the_bad_characters():
    with pytest.raises(StorageError, match=r"contains '\$'"):
        clean_path("cost$.txt")


def test_a_file_over_the_size_limit_is_refused(alice_api, settings):
    settings.KAKEHASHI_MAX_UPLOAD_BYTES = 10
    response = _upload(alice_api, b"x" * 11)
    assert response.status_code == 413 and response.json()["code"] == "too_large"
    assert StoredFile.objects.count() == 0


def test_the_projects_quota_holds_on_the_disk_too(alice_api, local_site):
    local_site.project.storage_quota_bytes = 10
    local_site.project.save()
    assert _upload(alice_api, b"x" * 6, path="a.txt").status_code == 201
    refused = _upload(alice_api, b"y" * 6, path="b.txt")
    assert refused.status_code == 413 and refused.json()["code"] == "quota_exceeded"
    assert "4 B left of its 10 B storage quota" in refused.json()["detail"]
    # Replacing a file frees its bytes.
    assert _upload(alice_api, b"z" * 9, path="a.txt", overwrite="true").status_code == 200


def test_a_body_declared_too_large_is_refused_before_it_is_read(alice_api, settings):
    settings.KAKEHASHI_MAX_UPLOAD_BYTES = 10
    response = alice_api.client.post(FILES, b"", content_type="multipart/form-data; boundary=x",
                                      headers={"Authorization": f"Bearer {alice_api.token}"},
                                      CONTENT_LENGTH=str(10 * 1024 * 1024))
    assert response.status_code == 413


def test_a_missing_file_field_is_a_400(alice_api):
    response = alice_api.upload(FILES, {"path": "x.txt"})
    assert response.status_code == 400 and response.json()["field"] == "file"


def test_other_projects_files_are_not_found(alice_api, mallory_api):
    row_id = _upload(alice_api, b"secret").json()["id"]
    assert mallory_api.get(FILES).status_code == 404
    assert mallory_api.get(f"{FILES}{row_id}/download/").status_code == 404
    assert _upload(mallory_api, b"intrusion", path="x.txt").status_code == 404
    # Nor through mallory's own project's URL.
    assert mallory_api.get(f"/api/v1/projects/nlp/files/{row_id}/download/").status_code == 404
    assert StoredFile.objects.count() == 1


def test_viewers_and_read_tokens_can_download_but_not_upload(local_site, alice_api, make_user, api_as):
    row_id = _upload(alice_api, b"shared").json()["id"]
    viewer = make_user("victor")
    Membership.objects.create(user=viewer, project=local_site.project, role=Role.VIEWER)
    viewer_api = api_as(viewer, "read", "submit")
    assert viewer_api.get(f"{FILES}{row_id}/download/").status_code == 200
    refused = _upload(viewer_api, b"nope", path="v.txt")
    assert refused.status_code == 403 and "role does not allow" in refused.json()["detail"]
    read_only = api_as(local_site.alice, "read")
    assert read_only.get(FILES).status_code == 200
    assert _upload(read_only, b"nope", path="r.txt").status_code == 403
    assert StoredFile.objects.count() == 1


# ------------------------------------------------------------------------------------------ the Data page


def test_the_data_page_lists_uploads_and_downloads_for_members_only(client, local_site, media_root):
    client.force_login(local_site.alice)
    page = client.get("/data/")
    assert page.status_code == 200 and "Upload a file" in page.content.decode()
    response = client.post("/data/", {"project": "vision", "path": "in/page.txt",
                                      "file": SimpleUploadedFile("page.txt", b"from the page")})
    assert response.status_code == 302
    row = StoredFile.objects.get()
    listing = client.get("/data/").content.decode()
    assert "in/page.txt" in listing and f"/data/{row.pk}/download/" in listing
    download = client.get(f"/data/{row.pk}/download/")
    assert b"".join(download.streaming_content) == b"from the page"

    client.force_login(local_site.mallory)
    assert "in/page.txt" not in client.get("/data/").content.decode()
    assert client.get(f"/data/{row.pk}/download/").status_code == 404
    # mallory cannot pick alice's project in the form.
    response = client.post("/data/", {"project": "vision", "file": SimpleUploadedFile("x.txt", b"x")})
    assert response.status_code == 400 and StoredFile.objects.count() == 1


def test_the_data_page_shows_a_bad_path_as_a_form_error(client, local_site):
    client.force_login(local_site.alice)
    response = client.post("/data/", {"project": "vision", "path": "../x", "file": SimpleUploadedFile("x.txt", b"x")})
    assert response.status_code == 400
    assert "path" in response.context["form"].errors and StoredFile.objects.count() == 0


def test_the_data_page_needs_a_login(client):
    assert client.get("/data/").status_code == 302
