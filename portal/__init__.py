# Load the Celery app with Django, so that shared tasks sent from the portal use its broker.
try:
    from workers.celery import app as celery_app
except ModuleNotFoundError as exc:
    # ``python -m portal.client`` runs on CI machines that have none of the portal's dependencies.
    if exc.name != "celery":
        raise
    celery_app = None

__all__ = ("celery_app",)
