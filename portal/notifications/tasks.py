from celery import shared_task
from django.conf import settings
from django.core.mail import send_mail


@shared_task(autoretry_for=(OSError,), retry_backoff=True, max_retries=5)
def send_notification_email_task(to: str, subject: str, body: str) -> None:
    """One email, after the ending it tells of has committed (portal/notifications/actions.py)."""
    send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [to])
