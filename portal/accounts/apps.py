from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "portal.accounts"
    label = "accounts"

    def ready(self):
        from . import signals  # noqa: F401
