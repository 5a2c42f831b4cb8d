"""OpenAPI details drf-spectacular cannot infer: the bearer-token scheme, shared error answers, the description."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiResponse

from portal.api.serializers import ErrorSerializer

DESCRIPTION = """
Run jobs on HPC clusters and the cloud inside project budgets. Everything the portal's pages do, scripts can
do here; the `kakehashi` command-line tool (`pip install ./cli`) is a thin client of this API.

**Authentication.** Send `Authorization: Bearer kh_…` with a personal API token (create one under
Settings → API tokens, or `python manage.py issue_token USER`). A token has scopes: `read` for every GET,
`submit` for submitting and cancelling jobs and uploading files, `admin` for everything. Your role in each
project (owner, admin, member, viewer) still applies: viewers can read but never submit. From JupyterLab on the
portal's JupyterHub, `Authorization: token <hub token>` works too: the hub says whose token it is, and it may read
and submit as that person's Kakehashi account.

**Errors** are JSON `{"detail": "...", "code": "...", "field": "..."}`: 400 invalid input (`field` names it),
401 missing, unknown, expired or revoked token, 403 the token's scope or your role does not allow it,
404 not found — also for anything in a project you are not a member of, so other projects' jobs and files
are never revealed — 409 conflict (a job that already ended, a file that exists, an upload already completed), 413 file too large
or storage quota exceeded, 503 the object store could not be reached,
429 too many requests (see `Retry-After`).

**402 Payment Required** means the request is valid and allowed but the project's strict budget cannot cover
the job's estimated cost (`code: budget_exceeded`); the message says how much is left. It is kept apart from
400 and 403 so that scripts can tell "fix the request" and "you may not" from "ask for more budget or a
smaller job". A dry run (`"dry_run": true`) shows the estimate and whether it fits without reserving anything.

**Files** go straight to the site's object store, never through the portal: `POST
/api/v1/projects/{slug}/uploads/` with path and size, then per part a presigned PUT bound to the part's SHA-256
(`parts/`), then `complete/` with the whole file's SHA-256 (`kakehashi upload` does all of it, resumably). The
project's storage quota is checked at both ends (413 `quota_exceeded` says how much is left). Downloads answer
with a redirect to a short-lived presigned GET (Range works).

**Idempotency.** Send an `Idempotency-Key` header with `POST /api/v1/jobs/`: repeating the request with the
same key returns the first job (status 200) instead of submitting it again.
"""


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "portal.api.authentication.TokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "kh_<43 characters>"}


def error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


# The refusals every authenticated endpoint can answer with.
COMMON_ERRORS = {
    401: error("no token, or a malformed, unknown, expired or revoked one"),
    403: error("the token's scope or your role in the project does not allow this"),
    429: error("too many requests with this token; see Retry-After"),
}
NOT_FOUND = {404: error("not found, or in a project you cannot see")}
BAD_INPUT = {400: error("invalid input; `field` names it")}
