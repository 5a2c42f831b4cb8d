"""Start the test OpenID Connect provider: python -m tests.signin.oidc_idp.serve STATE_DIR PORT

STATE_DIR holds users.json ([{username, password, email, email_verified, …}]) and client.json ({client_id,
client_secret, redirect_uris: [...]}); the signing key and the database are created there. Prints "ready" when
it answers.
"""

import json
import os
import sys
from pathlib import Path


def main() -> None:
    state, port = Path(sys.argv[1]), int(sys.argv[2])
    os.environ["KAKEHASHI_TEST_IDP_DIR"] = str(state)
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.signin.oidc_idp.settings"
    key_file = state / "signing-key.pem"
    if not key_file.exists():
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0, interactive=False)
    for person in json.loads((state / "users.json").read_text()):
        user, _ = get_user_model().objects.get_or_create(username=person["username"])
        user.email = person["email"]
        user.set_password(person["password"])
        user.save()
    client = json.loads((state / "client.json").read_text())
    Application.objects.update_or_create(client_id=client["client_id"], defaults={
        "name": "Kakehashi", "client_secret": client["client_secret"],
        "client_type": Application.CLIENT_CONFIDENTIAL,
        "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
        "redirect_uris": " ".join(client["redirect_uris"]), "algorithm": Application.RS256_ALGORITHM,
        "skip_authorization": True,  # the university's own portal: no consent screen
    })
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler, get_internal_wsgi_application

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format, *args):  # noqa: A002
            sys.stderr.write("idp: " + (format % args) + "\n")

    server = ThreadedWSGIServer(("127.0.0.1", port), QuietHandler)
    server.set_app(get_internal_wsgi_application())
    print("ready", flush=True)
    server.serve_forever()

if __name__ == "__main__":
    main()
