from django.conf import settings


def signup(request):
    """Whether the login page offers sign-up (PLIMSOLL_SIGNUP)."""
    return {"signup_open": settings.PLIMSOLL_SIGNUP}
