from django.conf import settings
from django.db.models.signals import post_save
from django.dispatch import receiver


@receiver(post_save, sender=settings.AUTH_USER_MODEL)
def give_new_user_a_team(sender, instance, created, raw=False, **kwargs):
    """Every user has a team of their own from the start, so they can create a project at once."""
    if created and not raw:
        from .services import team_create

        team_create(name=f"{instance.get_username()}'s team", owner=instance)
