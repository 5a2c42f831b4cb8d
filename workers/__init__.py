from workers.celery import app

__all__ = ["app"]
