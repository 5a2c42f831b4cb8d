"""The claims the test provider asserts: each user's address and whether the provider vouches for it."""

import json
import os
from pathlib import Path

from oauth2_provider.oauth2_validators import OAuth2Validator


def people() -> dict[str, dict]:
    return {p["username"]: p for p in json.loads((Path(os.environ["KAKEHASHI_TEST_IDP_DIR"]) / "users.json").read_text())}


class ClaimsValidator(OAuth2Validator):
    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, "preferred_username": "profile"}

    def get_additional_claims(self, request):
        person = people()[request.user.username]
        return {
            "preferred_username": person["username"],
            "email": person["email"],
            "email_verified": bool(person.get("email_verified", False)),
            "given_name": person.get("given_name", ""),
            "family_name": person.get("family_name", ""),
        }
