"""Plimsoll settings: one module, read from the environment.

Every variable has a default that lets a fresh checkout run (the *embedded default*:
SQLite in WAL mode and Celery's file-system broker, both under ``var/``). Setting
``DATABASE_URL`` and ``CELERY_BROKER_URL`` moves the same code onto PostgreSQL and
Redis. A malformed value stops the process at start with a message naming the variable.
"""

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("PLIMSOLL_VAR_DIR", BASE_DIR / "var"))


def envbool(name: str, default: str) -> bool:
    value = os.environ.get(name, default).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ImproperlyConfigured(f"{name}={value!r}: expected true or false")


def envint(name: str, default: str, *, minimum: int | None = None) -> int:
    value = os.environ.get(name, default)
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r}: expected a whole number") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number}: must be at least {minimum}")
    return number


def envsecret(name: str, default: str) -> str:
    """Reads NAME, or the file named by NAME_FILE (Docker secrets)."""
    if path := os.environ.get(f"{name}_FILE"):
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={path!r}: {exc.strerror}") from None
    return os.environ.get(name, default)


DEBUG = envbool("DEBUG", "false")
SECRET_KEY = envsecret("SECRET_KEY", "")
if not SECRET_KEY:
    # A fresh checkout gets a key of its own, kept under var/ so sessions survive restarts.
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        from django.core.management.utils import get_random_secret_key

        key_file.write_text(get_random_secret_key())
        key_file.chmod(0o600)
    SECRET_KEY = key_file.read_text().strip()

ALLOWED_HOSTS = [
    h.strip() for h in os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h.strip()
]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]
SITE_URL = os.environ.get("SITE_URL", "http://127.0.0.1:8000").rstrip("/")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "template_partials",
    "rest_framework",
    "portal.accounts",
    "portal.projects",
    "portal.runs",
    "portal.history",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# Database: PostgreSQL through DATABASE_URL, else SQLite (WAL) under var/.
SQLITE_OPTIONS = {
    # WAL lets the web server read while a worker writes its interval rows;
    # IMMEDIATE takes the write lock up front, so writers queue instead of failing.
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    "transaction_mode": "IMMEDIATE",
    "timeout": 30,
}
DATABASE_URL = os.environ.get("DATABASE_URL", "")
if DATABASE_URL:
    try:
        DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)}
    except ValueError as exc:
        raise ImproperlyConfigured(f"DATABASE_URL: {exc}") from None
    engine = DATABASES["default"]["ENGINE"]
    if engine == "django.db.backends.sqlite3":
        # sqlite:////absolute/path, used by tests to point worker processes at the test database.
        DATABASES["default"].update(OPTIONS=SQLITE_OPTIONS, CONN_MAX_AGE=0)
    elif engine != "django.db.backends.postgresql":
        raise ImproperlyConfigured("DATABASE_URL: expected postgres://… (or sqlite:////path for tests)")
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "plimsoll.sqlite3",
            "OPTIONS": SQLITE_OPTIONS,
            # Worker processes started by the tests must see the test database: a file, not memory.
            "TEST": {"NAME": str(VAR_DIR / "test_plimsoll.sqlite3")},
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

MIGRATION_MODULES = {
    "accounts": "migrations.accounts",
    "projects": "migrations.projects",
    "runs": "migrations.runs",
    "history": "migrations.history",
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "projects:list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"  # collectstatic writes here (Docker); whitenoise serves finders otherwise
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
}

# Celery: Redis through CELERY_BROKER_URL, else the file-system transport under var/.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem"):
    _broker_dir = VAR_DIR / "broker"
    for sub in ("queue", "processed", "control"):
        (_broker_dir / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        # Exchange bindings; without this kombu writes them to ./control in the working directory.
        "control_folder": str(_broker_dir / "control"),
        # The folder is polled (1 s by default): shards must reach their workers before their common start.
        "polling_interval": 0.2,
        "store_processed": False,
    }
elif not CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    raise ImproperlyConfigured(f"CELERY_BROKER_URL={CELERY_BROKER_URL!r}: expected redis://… or filesystem://")

# Load generation.
# Hosts and networks a run may send load to; the engine re-checks each resolved address on connect.
PLIMSOLL_ALLOWED_TARGETS = os.environ.get("PLIMSOLL_ALLOWED_TARGETS", "127.0.0.0/8,::1/128,localhost")
try:
    from workers.engine.targets import parse_allowlist

    parse_allowlist(PLIMSOLL_ALLOWED_TARGETS)
except ValueError as exc:
    raise ImproperlyConfigured(f"PLIMSOLL_ALLOWED_TARGETS: {exc}") from None
# Users one shard (one Celery task) simulates; a larger run is split across workers.
PLIMSOLL_SHARD_MAX_USERS = envint("PLIMSOLL_SHARD_MAX_USERS", "500", minimum=1)
# Seconds between enqueueing a run's shards and their common start, so all workers start together.
PLIMSOLL_START_DELAY = envint("PLIMSOLL_START_DELAY", "2", minimum=0)
# A shard silent this long is lost (its worker died); the run ends as partial.
PLIMSOLL_SHARD_TIMEOUT = envint("PLIMSOLL_SHARD_TIMEOUT", "30", minimum=5)
# Longest run a plan may ask for (seconds).
PLIMSOLL_MAX_RUN_SECONDS = envint("PLIMSOLL_MAX_RUN_SECONDS", str(72 * 3600), minimum=1)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}
