"""A small SAML 2.0 identity provider for the sign-in tests, built on pysaml2's IdP (saml2.server.Server), in its own
process: python -m tests.signin.saml_idp.serve STATE_DIR PORT

It behaves as a GakuNin/Shibboleth IdP does for the portal: HTTP-Redirect AuthnRequests in, a login form, then a
signed Response through the HTTP-POST binding, attributes named by their OIDs (urn:oid:…, the URI name format):
eduPersonPrincipalName, mail, givenName, sn. STATE_DIR holds users.json ([{username, password, eppn, mail, …}]);
its signing key and certificate are created there (idp.key, idp.crt). The portal's SP metadata is registered with a
POST to /sp-metadata, as a federation distributes it. Prints "ready" when it answers.
"""

from __future__ import annotations

import html
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from socketserver import ThreadingMixIn
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from saml2 import BINDING_HTTP_POST, BINDING_HTTP_REDIRECT
from saml2.config import IdPConfig
from saml2.metadata import create_metadata_string
from saml2.saml import NAME_FORMAT_URI, NAMEID_FORMAT_PERSISTENT, NameID
from saml2.server import Server


def _self_signed(state: Path, host: str) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key_file, cert_file = state / "idp.key", state / "idp.crt"
    if not key_file.exists():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
        now = datetime.now(UTC)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(days=1))
                .not_valid_after(now + timedelta(days=30)).sign(key, hashes.SHA256()))
        key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                               serialization.NoEncryption()))
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key_file, cert_file


def make_idp(state: Path, base: str) -> Server:
    key_file, cert_file = _self_signed(state, "idp.test")
    config = IdPConfig()
    config.load({
        "entityid": f"{base}/metadata",
        "service": {"idp": {
            "endpoints": {"single_sign_on_service": [(f"{base}/sso/redirect", BINDING_HTTP_REDIRECT)]},
            "name_id_format": [NAMEID_FORMAT_PERSISTENT],
            "policy": {"default": {"lifetime": {"minutes": 15}, "attribute_restrictions": None,
                                   "name_form": NAME_FORMAT_URI}},
            "want_authn_requests_signed": False,
        }},
        "key_file": str(key_file),
        "cert_file": str(cert_file),
        "xmlsec_binary": "/usr/bin/xmlsec1",
        "metadata": {},
    })
    return Server(config=config)


class App:
    def __init__(self, state: Path, base: str):
        self.idp = make_idp(state, base)
        self.people = {p["username"]: p for p in json.loads((state / "users.json").read_text())}
        self.metadata = create_metadata_string(None, config=self.idp.config, valid=24).decode()

    def __call__(self, environ, start_response):
        path, method = environ["PATH_INFO"], environ["REQUEST_METHOD"]
        if path == "/metadata":
            return self._send(start_response, "200 OK", self.metadata, "application/samlmetadata+xml")
        if path == "/sp-metadata" and method == "POST":
            # What a federation does for its IdPs: hand them the service provider's metadata (entity ID, ACS URL).
            size = int(environ.get("CONTENT_LENGTH") or 0)
            self.idp.metadata.load("inline", environ["wsgi.input"].read(size).decode())
            return self._send(start_response, "200 OK", "registered", "text/plain")
        if path == "/sso/redirect" and method == "GET":
            query = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
            request = self.idp.parse_authn_request(query["SAMLRequest"], BINDING_HTTP_REDIRECT)  # refuses a bad one
            return self._send(start_response, "200 OK", self._login_page(query, request.message.issuer.text))
        if path == "/sso/login" and method == "POST":
            size = int(environ.get("CONTENT_LENGTH") or 0)
            form = {k: v[0] for k, v in parse_qs(environ["wsgi.input"].read(size).decode()).items()}
            person = self.people.get(form.get("username", ""))
            if person is None or person["password"] != form.get("password"):
                return self._send(start_response, "200 OK", self._login_page(form, "", error=True))
            return self._send(start_response, "200 OK", self._response_page(form, person))
        return self._send(start_response, "404 Not Found", "not found", "text/plain")

    def _login_page(self, query: dict, sp: str, *, error: bool = False) -> str:
        keep = "".join(f'<input type="hidden" name="{k}" value="{html.escape(query[k])}">'
                       for k in ("SAMLRequest", "RelayState") if k in query)
        return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>GakuNin test IdP</title></head><body>"
                f"<h1>Institution sign-in</h1><p>For {html.escape(sp)}</p>"
                + ('<p role="alert">Wrong user name or password.</p>' if error else "")
                + f'<form method="post" action="/sso/login">{keep}'
                '<label for="u">User name</label> <input id="u" name="username" autocomplete="username">'
                '<label for="p">Password</label> <input id="p" type="password" name="password">'
                '<button type="submit">Log in</button></form></body></html>')

    def _response_page(self, form: dict, person: dict) -> str:
        request = self.idp.parse_authn_request(form["SAMLRequest"], BINDING_HTTP_REDIRECT).message
        identity = {"eduPersonPrincipalName": person["eppn"], "mail": person["mail"],
                    "givenName": person.get("givenName", ""), "sn": person.get("sn", "")}
        response = self.idp.create_authn_response(
            {k: v for k, v in identity.items() if v}, in_response_to=request.id,
            destination=request.assertion_consumer_service_url, sp_entity_id=request.issuer.text,
            name_id=NameID(format=NAMEID_FORMAT_PERSISTENT, text=person["eppn"]), userid=person["eppn"],
            authn={"class_ref": "urn:oasis:names:tc:SAML:2.0:ac:classes:PasswordProtectedTransport"},
            sign_assertion=True, sign_response=True,
            # SHA-256, as Shibboleth IdPs sign; the portal refuses SHA-1 (python3-saml's reject_deprecated_algorithm).
            sign_alg="http://www.w3.org/2001/04/xmldsig-more#rsa-sha256",
            digest_alg="http://www.w3.org/2001/04/xmlenc#sha256",
        )
        args = self.idp.apply_binding(BINDING_HTTP_POST, str(response), request.assertion_consumer_service_url,
                                      form.get("RelayState", ""), response=True)
        return args["data"]

    @staticmethod
    def _send(start_response, status: str, body: str, content_type: str = "text/html; charset=utf-8"):
        data = body.encode()
        start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(data)))])
        return [data]


class ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002
        sys.stderr.write("saml-idp: " + (format % args) + "\n")


def main() -> None:
    state, port = Path(sys.argv[1]), int(sys.argv[2])
    app = App(state, f"http://127.0.0.1:{port}")
    server = make_server("127.0.0.1", port, app, server_class=ThreadingServer, handler_class=QuietHandler)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
