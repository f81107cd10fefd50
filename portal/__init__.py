# Load the Celery app with Django, so that shared tasks sent from the portal use its broker.
from workers.celery import app as celery_app

__all__ = ("celery_app",)
