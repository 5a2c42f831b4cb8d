# The Celery app must be loaded whenever Django is, so tasks queued from web requests use its broker.
from workers.celery import app as celery_app

__all__ = ["celery_app"]
