from django.apps import AppConfig


class SessionsConfig(AppConfig):
    name = "portal.sessions"
    label = "kh_sessions"  # "sessions" is django.contrib.sessions' label
    verbose_name = "Interactive sessions"

    def ready(self) -> None:
        # The idle rule judges a session by its JupyterLab's last activity on the hub too: the sample reader asks
        # this app for it every cycle (this app depends on portal/samples, not the other way round).
        from portal.samples.fetch import tell_activity_with
        from portal.sessions.activity import last_activity

        tell_activity_with(last_activity)
