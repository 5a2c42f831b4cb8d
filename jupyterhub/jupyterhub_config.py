"""JupyterHub with the Kakehashi portal as a service (the tests and docker-compose both start the hub with this file).

What it shows:
- the portal is the hub service `kakehashi` (KAKEHASHI_HUB_SERVICE_NAME): the proxy routes /services/kakehashi/ to
  it, and it is the hub's OAuth client `service-kakehashi` whose secret is the service's API token. OAuth redirects
  go to the portal's own callback (KAKEHASHI_HUB_CALLBACK_URL, not under the proxy) and are approved without a
  confirmation page (`oauth_no_confirm`): the portal is part of the site, not a third party.
- roles: every user may access the service (`access:services!service=kakehashi`, without which the OAuth step
  answers 403); the service itself may list and read users (`python manage.py hub_accounts` shows who matches
  whom); each single-user server's token ($JUPYTERHUB_API_TOKEN) carries the same access scope, which the portal
  requires before it accepts the token (as JupyterHub's own HubAuth does for services).
- single-user servers run JupyterLab with the kakehashi-lab extension and know where the portal is
  (KAKEHASHI_PORTAL_URL; links shown in Lab go through /services/kakehashi/, which signs the user in), and Lab's
  news and update pop-ups are off (lab-settings/overrides.json).
- the proxy is configurable-http-proxy from npm, pinned by package-lock.json (`npm ci` in this folder).

Environment (the KAKEHASHI_HUB_* names are the ones the portal reads too, so one value serves both):
  KAKEHASHI_HUB_API_TOKEN        required: the service's API token (the portal's OAuth client secret)
  KAKEHASHI_HUB_CALLBACK_URL     required: the portal's OAuth callback, http(s)://PORTAL/accounts/jupyterhub/login/callback/
  KAKEHASHI_PORTAL_URL           required: where the proxy and the single-user servers reach the portal
  KAKEHASHI_HUB_SHARED_PASSWORD  required with the shared-password authenticator (8+ characters)
  KAKEHASHI_HUB_USERS            comma-separated users allowed to log in
  KAKEHASHI_HUB_AUTHENTICATOR    default shared-password (a centre sets its own: PAM, LDAP, OAuthenticator…)
  KAKEHASHI_HUB_SPAWNER          default simple: every user's server runs as the hub's own OS user (tests and demos
                                 only; a centre uses systemdspawner, dockerspawner, batchspawner…)
  KAKEHASHI_HUB_BIND_URL         the proxy's public address (default http://127.0.0.1:8001)
  KAKEHASHI_HUB_INTERNAL_URL     the hub's own address (default http://127.0.0.1:8081)
  KAKEHASHI_HUB_PROXY_API_URL    the proxy's API (default http://127.0.0.1:8002)
  KAKEHASHI_HUB_STATE_DIR        database, cookie secret, proxy pid, users' homes (default /srv/jupyterhub)
  KAKEHASHI_HUB_SERVICE_NAME     default kakehashi
"""

import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file

HERE = Path(__file__).resolve().parent


def required(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        sys.exit(f"jupyterhub_config.py: set {name} (see the top of {__file__})")
    return value


def url(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, "").strip() or default or required(name)
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        sys.exit(f"jupyterhub_config.py: {name}={value!r} is not an http(s):// URL")
    return value


service = os.environ.get("KAKEHASHI_HUB_SERVICE_NAME", "kakehashi")
service_token = required("KAKEHASHI_HUB_API_TOKEN")
callback_url = url("KAKEHASHI_HUB_CALLBACK_URL")
portal_url = url("KAKEHASHI_PORTAL_URL").rstrip("/")
state = Path(os.environ.get("KAKEHASHI_HUB_STATE_DIR", "/srv/jupyterhub"))
state.mkdir(parents=True, exist_ok=True)

# ---------------------------------------------------------------------------------------------- network
c.JupyterHub.bind_url = url("KAKEHASHI_HUB_BIND_URL", "http://127.0.0.1:8001")
c.JupyterHub.hub_bind_url = url("KAKEHASHI_HUB_INTERNAL_URL", "http://127.0.0.1:8081")
c.ConfigurableHTTPProxy.api_url = url("KAKEHASHI_HUB_PROXY_API_URL", "http://127.0.0.1:8002")
c.ConfigurableHTTPProxy.command = [str(HERE / "node_modules" / ".bin" / "configurable-http-proxy")]
# The hub stops the proxy it started through this file; without it a hub killed mid-start leaves the proxy
# holding its ports.
c.ConfigurableHTTPProxy.pid_file = str(state / "proxy.pid")
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")

# ------------------------------------------------------------------------------------------------ users
c.JupyterHub.authenticator_class = os.environ.get("KAKEHASHI_HUB_AUTHENTICATOR", "shared-password")
if c.JupyterHub.authenticator_class == "shared-password":
    c.SharedPasswordAuthenticator.user_password = required("KAKEHASHI_HUB_SHARED_PASSWORD")
c.Authenticator.allowed_users = {u.strip() for u in os.environ.get("KAKEHASHI_HUB_USERS", "").split(",") if u.strip()}

# -------------------------------------------------------------------------------------- users' servers
c.JupyterHub.spawner_class = os.environ.get("KAKEHASHI_HUB_SPAWNER", "simple")
c.SimpleLocalProcessSpawner.home_dir_template = str(state / "home" / "{username}")
# The hub's own environment has JupyterLab and the kakehashi-lab extension.
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.args = [f"--LabApp.app_settings_dir={HERE / 'lab-settings'}"]
if os.getuid() == 0:
    c.Spawner.args.append("--allow-root")
c.Spawner.environment = {"KAKEHASHI_PORTAL_URL": portal_url, "KAKEHASHI_HUB_SERVICE_NAME": service}
# $JUPYTERHUB_API_TOKEN also carries access to the portal: the Lab extension sends it, and the portal accepts only
# tokens with that scope.
c.Spawner.server_token_scopes = ["users:activity!user", "access:servers!server", f"access:services!service={service}"]

# ----------------------------------------------------------------------------------- the portal service
c.JupyterHub.services = [{
    "name": service,
    "url": portal_url,  # /services/kakehashi/ on the hub leads to the portal (which signs the user in via OAuth)
    "api_token": service_token,
    "oauth_client_id": os.environ.get("KAKEHASHI_HUB_CLIENT_ID", f"service-{service}"),
    "oauth_redirect_uri": callback_url,
    "oauth_no_confirm": True,
    "display": True,
    "info": {"description": "Kakehashi: run notebooks and jobs on the cluster and the cloud"},
}]
service_scopes = ["list:users", "read:users"]

# ------------------------------------------------------------------- sessions: servers on compute nodes
# KAKEHASHI_HUB_SPAWNER=kakehashi: each (named) server is a Kakehashi session, a job on a compute node that the
# portal budgets and tracks (kakehashi_lab/spawner.py, docs/guide/sessions.md). The portal's Sessions page asks the
# hub to start named servers, hence the service's `servers` scope.
if c.JupyterHub.spawner_class == "kakehashi":
    sys.path.insert(0, str(HERE / "kakehashi-lab"))  # this checkout's kakehashi_lab, whatever is installed
    c.JupyterHub.spawner_class = "kakehashi_lab.spawner.KakehashiSpawner"
    c.KakehashiSpawner.portal_url = portal_url
    c.KakehashiSpawner.service_name = service  # the spawn page asks the portal's estimate through /services/<name>/
    c.JupyterHub.allow_named_servers = True
    c.JupyterHub.named_server_limit_per_user = int(os.environ.get("KAKEHASHI_HUB_SESSIONS_PER_USER", "5"))
    # The hub answers a start at once (202) instead of waiting up to 10 s: the portal's Start returns, and the session
    # appears on its page while the hub waits for it (a handler setting, hence tornado_settings).
    c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0}
    service_scopes.append("servers")

c.JupyterHub.load_roles = [
    {"name": "user", "scopes": ["self", f"access:services!service={service}"]},
    {"name": f"{service}-service", "description": "The portal reads users to match them with its accounts"
     + (" and starts and stops their sessions' servers" if "servers" in service_scopes else ""),
     "scopes": service_scopes, "services": [service]},
]
