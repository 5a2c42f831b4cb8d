from celery import shared_task

from portal.job_states import ACTIVE_STATES
from portal.sessions import hub
from portal.sessions.models import Session


# A hub still stopping the server answers 400 "pending stop": ask again, 3 s, 6 s, … apart, for about two minutes.
@shared_task(autoretry_for=(hub.HubBusy,), retry_backoff=3, retry_backoff_max=30, max_retries=8)
def forget_hub_server_task(job_id: int) -> None:
    session = Session.objects.filter(job_id=job_id).first()
    if session is None:
        return
    # The same name started again since (a retry can come late): that newer session's server stays.
    if Session.objects.filter(hub_user=session.hub_user, server_name=session.server_name,
                              job__state__in=ACTIVE_STATES).exists():
        return
    hub.forget_on_hub(session.hub_user, session.server_name)
