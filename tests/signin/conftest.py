"""Sign-in tests: a real OpenID Connect provider (tests/signin/oidc_idp, django-oauth-toolkit) in its own process on a
loopback port, registered in the portal as an IdentityProvider."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import pytest
import requests

# The browser tests' fixtures (a fresh page per person, screenshots), for the sign-in tests that use Chromium.
from tests.browser.conftest import new_page, page, shots  # noqa: E402,F401
from tests.seaweedfs import free_port

ROOT = Path(__file__).resolve().parents[2]
CLIENT_ID = "kakehashi-portal"
CLIENT_SECRET = "oidc-client-secret-" + "7f3a9c1e5b" * 3  # grepped for in tests/portal/test_secrets.py
SLUG = "todai"
# Who the provider knows. The portal's own accounts are made by each test.
IDP_PEOPLE = [
    {"username": "hanako", "password": "idp-pass-hanako", "email": "hanako@u-tokyo.ac.jp", "email_verified": True,
     "given_name": "Hanako", "family_name": "Yamada"},
    {"username": "taro", "password": "idp-pass-taro", "email": "taro@u-tokyo.ac.jp", "email_verified": False},
    {"username": "guest", "password": "idp-pass-guest", "email": "guest@example.com", "email_verified": True},
]
PASSWORDS = {p["username"]: p["password"] for p in IDP_PEOPLE}


def _free_port() -> int:
    return free_port()  # below the ephemeral range: no outgoing connection takes it before the server binds it


class OIDCProvider:
    def __init__(self, url: str, log: Path):
        self.url, self.log = url, log

    @property
    def issuer(self) -> str:
        return f"{self.url}/o"


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory, live_server) -> OIDCProvider:
    """The provider, running for the whole session; it redirects back to the live server and to the test client."""
    state = tmp_path_factory.mktemp("oidc-idp")
    redirect_uris = [f"{base}/accounts/oidc/{SLUG}/login/callback/" for base in (live_server.url, "http://testserver")]
    (state / "users.json").write_text(json.dumps(IDP_PEOPLE))
    (state / "client.json").write_text(json.dumps(
        {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "redirect_uris": redirect_uris}))
    port = _free_port()
    log = state / "idp.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tests.signin.oidc_idp.serve", str(state), str(port)], cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the test OIDC provider exited: {log.read_text()[-2000:]}")
        try:
            if requests.get(f"{url}/o/.well-known/openid-configuration", timeout=2).status_code == 200:
                break
        except requests.ConnectionError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the test OIDC provider did not answer: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    yield OIDCProvider(url, log)
    proc.terminate()
    proc.wait(timeout=10)


def _start(module: str, state: Path, probe: str, what: str):
    """Run `python -m module STATE PORT` until `probe` (a path) answers 200; returns (process, base URL)."""
    port = _free_port()
    log = state / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", module, str(state), str(port)], cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited: {log.read_text()[-2000:]}")
        try:
            if requests.get(url + probe, timeout=2).status_code == 200:
                return proc, url
        except requests.ConnectionError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{what} did not answer: {log.read_text()[-2000:]}")
        time.sleep(0.2)


SAML_SLUG = "gakunin-todai"
# Who the SAML IdP knows, with the attributes a GakuNin IdP releases.
SAML_PEOPLE = [
    {"username": "sato", "password": "idp-pass-sato", "eppn": "sato@u-tokyo.ac.jp", "mail": "ichiro.sato@u-tokyo.ac.jp",
     "givenName": "Ichiro", "sn": "Sato"},
]


@pytest.fixture(scope="session")
def saml_idp(tmp_path_factory) -> str:
    """pysaml2's IdP (tests/signin/saml_idp) in its own process; its base URL (metadata at /metadata)."""
    state = tmp_path_factory.mktemp("saml-idp")
    (state / "users.json").write_text(json.dumps(SAML_PEOPLE))
    proc, url = _start("tests.signin.saml_idp.serve", state, "/metadata", "the test SAML IdP")
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def saml_identity_provider(saml_idp, db):
    """The IdP registered as a GakuNin IdP is: by its metadata URL, attributes by OID (the model's default mapping)."""
    from portal.accounts.models import IdentityProvider, Protocol

    return IdentityProvider.objects.create(
        protocol=Protocol.SAML, slug=SAML_SLUG, name="University of Tokyo (GakuNin)",
        saml_entity_id=f"{saml_idp}/metadata", saml_metadata_url=f"{saml_idp}/metadata",
        allowed_domains="u-tokyo.ac.jp", allow_new_users=True,
    )


def register_sp_metadata(xml: bytes) -> None:
    """Give the IdP the portal's SP metadata, as the federation does."""
    from portal.accounts.models import IdentityProvider

    idp_url = IdentityProvider.objects.get(slug=SAML_SLUG).saml_entity_id.removesuffix("/metadata")
    assert requests.post(f"{idp_url}/sp-metadata", data=xml, timeout=10).status_code == 200


def sign_in_with_saml(client, username: str, password: str | None = None):
    """The portal's SAML button, the IdP's login form, and the IdP's signed response posted back to the portal's ACS
    (what the IdP's auto-submitting page makes a browser do). Returns the portal's answer, or None when the IdP
    refused the password."""
    # Browsers always send Host (allauth's SAML reads it), and python3-saml wants a host name it accepts as one.
    client.defaults["HTTP_HOST"] = "localhost"
    register_sp_metadata(client.get(f"/accounts/saml/{SAML_SLUG}/metadata/").content)
    start = client.post(f"/accounts/saml/{SAML_SLUG}/login/")
    assert start.status_code == 302, start.content[:500]
    browser = requests.Session()
    login_page = browser.get(start["Location"], timeout=10)
    assert login_page.status_code == 200 and "Institution sign-in" in login_page.text, login_page.text[:500]
    hidden = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', login_page.text))
    person = next(p for p in SAML_PEOPLE if p["username"] == username)
    answer = browser.post(urljoin(login_page.url, "/sso/login"), data={
        **{k: html.unescape(v) for k, v in hidden.items()}, "username": username, "password": password or person["password"],
    }, timeout=10)
    if "Wrong user name or password" in answer.text:
        return None  # the IdP refused: nothing goes back to the portal
    action = html.unescape(re.search(r'<form action="([^"]+)" method="post">', answer.text).group(1))
    fields = {k: html.unescape(v) for k, v in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', answer.text)}
    assert action == f"http://localhost/accounts/saml/{SAML_SLUG}/acs/", action
    response = client.post(action.removeprefix("http://localhost"), fields)
    while response.status_code == 302 and "/acs/finish/" in response["Location"]:
        response = client.get(response["Location"])
    return response


@pytest.fixture
def identity_provider(oidc_provider, db):
    """The provider registered by a site admin: university addresses only, no linking, no new accounts (each test
    turns on what it is about)."""
    from portal.accounts.models import IdentityProvider, Protocol

    idp = IdentityProvider(protocol=Protocol.OIDC, slug=SLUG, name="University of Tokyo", server_url=oidc_provider.issuer,
                           client_id=CLIENT_ID, allowed_domains="u-tokyo.ac.jp")
    idp.set_client_secret(CLIENT_SECRET)
    idp.save()
    return idp


def sign_in_with_provider(client, username: str, *, password: str | None = None):
    """Through the portal's "Sign in with" button and the provider's own login form, with the Django test client
    on the portal's side and HTTP to the provider: returns the portal's answer to the provider's redirect back."""
    start = client.post(f"/accounts/oidc/{SLUG}/login/")
    assert start.status_code == 302, start.content[:500]
    browser = requests.Session()
    login_page = browser.get(start["Location"], timeout=10)
    assert login_page.status_code == 200 and "University sign-in" in login_page.text, login_page.text[:500]
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page.text).group(1)
    back = browser.post(login_page.url, data={
        "csrfmiddlewaretoken": csrf, "username": username, "password": password or PASSWORDS[username],
        "next": parse_qs(urlsplit(login_page.url).query)["next"][0],
    }, headers={"Referer": login_page.url}, allow_redirects=False, timeout=10)
    assert back.status_code == 302, back.text[:500]
    # Signed in at the provider: it continues the authorisation and sends the browser back to the portal.
    authorize = browser.get(urljoin(login_page.url, back.headers["Location"]), allow_redirects=False, timeout=10)
    assert authorize.status_code == 302, authorize.text[:500]
    callback = authorize.headers["Location"]
    assert callback.startswith("http://testserver/accounts/oidc/"), callback
    return client.get(callback.removeprefix("http://testserver"))
