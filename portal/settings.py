"""Plimsoll settings: one module, read from the environment.

Every variable has a default that lets a fresh checkout run (the *embedded default*:
SQLite in WAL mode and Celery's file-system broker, both under ``var/``). Setting
``DATABASE_URL`` and ``CELERY_BROKER_URL`` moves the same code onto PostgreSQL and
Redis. A malformed value stops the process at start with a message naming the variable.
"""

import ipaddress
import os
import re
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from portal import site_url as _site_url

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

# Links in mail and webhooks. Without SITE_URL: the address `make run PORT=…` serves on (portal/site_url.py).
SITE_URL = (
    os.environ.get("SITE_URL")
    or _site_url.default_site_url(os.environ.get("PLIMSOLL_HOST"), os.environ.get("PLIMSOLL_PORT"))
).rstrip("/")
# Without ALLOWED_HOSTS: the loopback names, and the host of a SITE_URL that is set, since the links the
# portal sends out must open it (issue 30: with SITE_URL=https://… alone, a deployment refused its own
# name and check --deploy gave four warnings). The host `make run HOST=…` derives is not added.
_SITE_HOST = _site_url.host_header(SITE_URL) if os.environ.get("SITE_URL") else None
_DEFAULT_HOSTS = ",".join(dict.fromkeys(["localhost", "127.0.0.1", "[::1]", *filter(None, [_SITE_HOST])]))
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", _DEFAULT_HOSTS).split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]
# The bundled demo target's address (`make run DEMO_PORT=…` passes its port): the example in forms' hints.
DEMO_BASE_URL = f"http://127.0.0.1:{os.environ.get('PLIMSOLL_DEMO_PORT') or '8001'}"

# HTTPS and browser protections (issue 10). Each reads its variable; the default is secure
# when DEBUG is off and the portal answers more than loopback names (ALLOWED_HOSTS) or its links
# are https (SITE_URL), i.e. when it is deployed, and off for a checkout on 127.0.0.1 (whose
# browser would be refused the Secure cookies over plain http). docker/.env.example sets them for
# HTTPS behind a proxy.
_LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "[::1]", "::1"}
DEPLOYED = not DEBUG and (
    any(h not in _LOOPBACK_HOSTS for h in ALLOWED_HOSTS) or SITE_URL.lower().startswith("https://")
)
_secure = "true" if DEPLOYED else "false"
SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", _secure)
CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", _secure)
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", _secure)
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", "31536000" if DEPLOYED else "0", minimum=0)
# includeSubDomains covers the names under the portal's own host name (*.plimsoll.example.com),
# not its parent domain's, so it is on wherever HSTS is (issue 30: check --deploy's W005).
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", _secure)
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", "false")
# HSTS preload (W021) is a one-way commitment: once browsers ship the domain in their preload list it
# takes months to leave it, and every subdomain must serve HTTPS for good. That is the operator's
# choice (SECURE_HSTS_PRELOAD=true, as docker/.env.example sets), so the warning is silenced until
# they make it, and check --deploy is otherwise clean.
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]


def envheader(name: str) -> tuple[str, str] | None:
    """``HTTP_X_FORWARDED_PROTO=https`` as Django's (header, value) pair; empty means none."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    header, sep, expected = value.partition("=")
    if not sep or not re.fullmatch(r"HTTP_[A-Z0-9_]+", header) or not expected:
        raise ImproperlyConfigured(
            f"{name}={value!r}: expected HTTP_HEADER_NAME=value, e.g. HTTP_X_FORWARDED_PROTO=https"
        )
    return header, expected


# Only behind a proxy that sets this header itself (and strips a client's): otherwise any
# client could claim to be on HTTPS.
SECURE_PROXY_SSL_HEADER = envheader("SECURE_PROXY_SSL_HEADER")
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
# Content-Security-Policy (django-csp): scripts, styles, images and fonts from the portal's
# own static files only (vendored, never a CDN); no inline code, no framing, forms post home.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

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
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "portal.accounts",
    "portal.projects",
    "portal.runs",
    "portal.history",
    "portal.sharing",
    "axes",  # issue 10: login throttling (portal/accounts/throttle.py)
    # Server metrics scraped during runs (issue 14)
    "portal.metrics",
    # i12-schedules: scheduled runs and their fires
    "portal.schedules",
    "portal.notifications",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",  # issue 10: the Content-Security-Policy header
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "portal.middleware.HtmxLoginRedirectMiddleware",  # a panel whose session ended goes to the login page
    # Last, as django-axes requires: turns a refused login into the lockout page.
    "axes.middleware.AxesMiddleware",
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
    "sharing": "migrations.sharing",
    "metrics": "migrations.metrics",
    "schedules": "migrations.schedules",
    "notifications": "migrations.notifications",
}

AUTH_PASSWORD_VALIDATORS = [
    # Issue 10: "victim123" for user victim, "20242024" and "Plimsoll" were accepted.
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
    {"NAME": "portal.accounts.passwords.SiteWordsValidator"},
    # Issue 30: "victimvictim" for user victim passed the similarity validator above (ratio 0.67).
    {"NAME": "portal.accounts.passwords.MostlyUsernameValidator"},
]
# Login throttling (issue 10, django-axes). Every authenticate(request=...) is counted:
# AXES_FAILURE_LIMIT failures for one account, or PLIMSOLL_LOGIN_ADDRESS_FAILURE_LIMIT from one
# client address, pause logins for the cool-off time. See portal/accounts/throttle.py.
AUTHENTICATION_BACKENDS = [
    "portal.accounts.throttle.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = envint("PLIMSOLL_LOGIN_FAILURE_LIMIT", "5", minimum=1)
# Failures from one client address, over all accounts (an office behind one NAT address shares it).
PLIMSOLL_LOGIN_ADDRESS_FAILURE_LIMIT = envint("PLIMSOLL_LOGIN_ADDRESS_FAILURE_LIMIT", "20", minimum=1)
AXES_HANDLER = "portal.accounts.throttle.LoginThrottleHandler"
AXES_COOLOFF_TIME = timedelta(minutes=envint("PLIMSOLL_LOGIN_COOLOFF_MINUTES", "15", minimum=1))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]  # either one locks: one account, or one address
# Failures are not forgotten on a success: a guesser with an account of their own would
# otherwise reset their address's count by logging in to it.
AXES_RESET_ON_SUCCESS = False
AXES_ENABLE_ACCESS_FAILURE_LOG = True  # the record owners see (AccessFailureLog.locked_out)
AXES_DISABLE_ACCESS_LOG = True  # successful logins are not recorded
AXES_LOCKOUT_CALLABLE = "portal.accounts.throttle.lockout_response"
AXES_CLIENT_IP_CALLABLE = "portal.accounts.throttle.client_ip"
AXES_VERBOSE = False
# Reverse proxies in front of the portal that append to X-Forwarded-For (0: none, use REMOTE_ADDR).
PLIMSOLL_TRUSTED_PROXIES = envint("PLIMSOLL_TRUSTED_PROXIES", "0", minimum=0)
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

# --- REST API (issue 11): /api/v1/, hashed bearer tokens, one error shape, OpenAPI by drf-spectacular.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",  # the browser, with CSRF
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "portal.api.pagination.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": [
        "portal.api.parsers.JSONParser",  # DRF's, with a bound on nesting (issue 28)
        "rest_framework.parsers.MultiPartParser",  # data-set uploads
    ],
    "DEFAULT_SCHEMA_CLASS": "portal.api.schema.AutoSchema",
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "portal.api.negotiation.JsonWhateverAccept",
    "EXCEPTION_HANDLER": "portal.api.errors.api_exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["portal.api.throttling.TokenRateThrottle"],
    # Per token (per user for the browser): a pipeline that loops on ?wait= needs a call a minute.
    "DEFAULT_THROTTLE_RATES": {"token": os.environ.get("PLIMSOLL_API_RATE", "600/min")},
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Plimsoll API",
    "DESCRIPTION": (
        "Everything a pipeline needs to run load tests: start a plan's run, wait for it, read its verdict "
        "and download its results as JUnit XML or CSV. Authenticate with `Authorization: Bearer <token>` "
        "(a token from the Tokens page or `manage.py create_token`). Errors are JSON: "
        "`{status, code, detail, fields?}`."
    ),
    "VERSION": "1",
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI from drf-spectacular-sidecar's files, served by us: never a CDN. (Not Redoc: its
    # page loads Google Fonts.)
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "portal.runs.models.Run.Status",
        "ShardStatusEnum": "portal.runs.models.RunShard.Status",
        "TrialSetStatusEnum": "portal.history.models.TrialSet.Status",
        "BaselineVerdictEnum": "portal.schedules.models.RunVerdict.Verdict",
        "VerdictRowVerdictEnum": "portal.schedules.models.ROW_VERDICTS",
        "TuningChangeStatusEnum": "portal.history.models.TuningChange.Status",
        "ExperimentStatusEnum": "portal.history.models.Experiment.Status",
        "RunKindEnum": "portal.runs.models.Run.Kind",
        "ShareLinkKindEnum": "portal.sharing.models.ShareLink.Kind",
        "ScheduleKindEnum": "portal.schedules.models.Schedule.Kind",
        "ChannelKindEnum": "portal.notifications.models.Channel.Kind",
        "ChannelEventEnum": "portal.notifications.models.Event",
        "StepKindEnum": "portal.projects.models.Step.Kind",
        "StreamKindEnum": "portal.projects.models.Step.StreamKind",
    },
}
# Long-polls (GET /api/v1/runs/<code>/?wait=S) hold a web thread while they wait (issue 30): at most this
# many per token over the whole site, per account (below), and per web process half its gunicorn threads
# (or this many, when set); a long-poll over a limit answers at once with the current state. See
# portal/api/longpoll.py.
PLIMSOLL_LONG_POLLS_PER_TOKEN = envint("PLIMSOLL_LONG_POLLS_PER_TOKEN", "2", minimum=0)
# ... and per account (its tokens and its browser together: tokens are free to make, so one account
# cannot take every process's slots with many of them).
PLIMSOLL_LONG_POLLS_PER_USER = envint("PLIMSOLL_LONG_POLLS_PER_USER", "2", minimum=0)
# ... and over the whole site, when set (0: bounded by the processes' caps alone).
PLIMSOLL_LONG_POLLS_TOTAL = envint("PLIMSOLL_LONG_POLLS_TOTAL", "0", minimum=0)
PLIMSOLL_LONG_POLLS_PER_PROCESS = (
    envint("PLIMSOLL_LONG_POLLS_PER_PROCESS", "0", minimum=0)
    if os.environ.get("PLIMSOLL_LONG_POLLS_PER_PROCESS")
    else None
)
# *Try it* (a test case page's, and POST /api/v1/test-cases/{code}/try/) runs one iteration in the web
# request, holding a web thread up to 15 s: at most this many at once per account over the whole site
# (its browser and tokens together); over it, nothing is sent and the page or the API (429) says so.
# See portal/projects/tryit.py.
PLIMSOLL_TRIES_PER_USER = envint("PLIMSOLL_TRIES_PER_USER", "2", minimum=0)
# Request bodies (not uploaded files) above this are refused; a 100,000-row CSV is uploaded as a file.
DATA_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024

# Celery: Redis through CELERY_BROKER_URL, else the file-system transport under var/.
# The file-system transport ignores the host; naming one keeps kombu from warning "No hostname was supplied".
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://localhost/")
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
    # kombu's transport, writing each message under a temporary name and renaming it: a worker never
    # reads a half-written message (issue 28: a JSONDecodeError crashed one). See workers/filesystem_broker.py.
    CELERY_BROKER_TRANSPORT = "workers.filesystem_broker:Transport"
elif not CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    raise ImproperlyConfigured(f"CELERY_BROKER_URL={CELERY_BROKER_URL!r}: expected redis://… or filesystem://")

# The cache that every web process shares: the API's rate limits (portal.api.throttling) count a
# token's requests across all of them, not per process. Redis beside the broker on the real stack
# (its keys carry the prefix, so they never meet Celery's; PLIMSOLL_CACHE_URL puts them elsewhere),
# files under var/ on the embedded default (one machine, so every process sees the same files).
PLIMSOLL_CACHE_URL = os.environ.get(
    "PLIMSOLL_CACHE_URL", CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://")) else ""
)
if PLIMSOLL_CACHE_URL.startswith(("redis://", "rediss://")):
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": PLIMSOLL_CACHE_URL,
            "KEY_PREFIX": os.environ.get("PLIMSOLL_CACHE_PREFIX", "plimsoll"),
        }
    }
elif PLIMSOLL_CACHE_URL:
    raise ImproperlyConfigured(f"PLIMSOLL_CACHE_URL={PLIMSOLL_CACHE_URL!r}: expected redis://…")
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache"),
            "KEY_PREFIX": os.environ.get("PLIMSOLL_CACHE_PREFIX", "plimsoll"),
        }
    }

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
# Admission (issue 25, docs/capacity.md): workers register their engine slots and labels every
# PLIMSOLL_WORKER_HEARTBEAT s; a worker silent for PLIMSOLL_WORKER_TTL s is dead and its slots no longer count.
PLIMSOLL_WORKER_HEARTBEAT = envint("PLIMSOLL_WORKER_HEARTBEAT", "5", minimum=1)
PLIMSOLL_WORKER_TTL = envint("PLIMSOLL_WORKER_TTL", "15", minimum=2)
# This worker's labels, "zone=eu-west,pool=private" (its pool is the queue it consumes: engine.<pool>).
PLIMSOLL_WORKER_LABELS = os.environ.get("PLIMSOLL_WORKER_LABELS", "")
try:  # at start: a worker whose labels cannot be read would run shards but never register its slots
    from workers.labels import parse_labels

    parse_labels(PLIMSOLL_WORKER_LABELS)
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
# Shards this worker runs at once; 0: its Celery concurrency.
PLIMSOLL_WORKER_SLOTS = envint("PLIMSOLL_WORKER_SLOTS", "0", minimum=0)
# Per-team limits (0: none): runs active at once (waiting runs do not count), peak users of one run,
# and user-hours run per calendar month (UTC). A team's own limits in the admin (TeamQuota) override these.
PLIMSOLL_TEAM_MAX_RUNS = envint("PLIMSOLL_TEAM_MAX_RUNS", "0", minimum=0)
PLIMSOLL_TEAM_MAX_USERS = envint("PLIMSOLL_TEAM_MAX_USERS", "0", minimum=0)
PLIMSOLL_TEAM_MAX_USER_HOURS = envint("PLIMSOLL_TEAM_MAX_USER_HOURS", "0", minimum=0)
# A run (or one of its shards) that achieved less than this % of its planned load (user-seconds,
# iterations for arrival rates) is incomplete: never passed, out of baselines (portal/runs/services/load.py).
PLIMSOLL_INCOMPLETE_BELOW_PCT = envint("PLIMSOLL_INCOMPLETE_BELOW_PCT", "95", minimum=1)
# Seconds between enqueueing a run's shards and their common start, so all workers start together.
PLIMSOLL_START_DELAY = envint("PLIMSOLL_START_DELAY", "2", minimum=0)
# A shard silent this long is lost (its worker died); the run ends as partial.
PLIMSOLL_SHARD_TIMEOUT = envint("PLIMSOLL_SHARD_TIMEOUT", "30", minimum=5)
# Longest run a plan may ask for (seconds).
PLIMSOLL_MAX_RUN_SECONDS = envint("PLIMSOLL_MAX_RUN_SECONDS", str(72 * 3600), minimum=1)
# Issue 9, the results store: a run left *finishing* this long (its finalize crashed or its
# worker was killed) is finalized again by the watchdog, at most this many attempts in all.
PLIMSOLL_FINALIZE_TIMEOUT = envint("PLIMSOLL_FINALIZE_TIMEOUT", "600", minimum=10)
PLIMSOLL_FINALIZE_ATTEMPTS = envint("PLIMSOLL_FINALIZE_ATTEMPTS", "3", minimum=1)
# Per-second label rows of a finished run are rolled up into per-minute rows this long after it ended.
PLIMSOLL_ROLLUP_AFTER = envint("PLIMSOLL_ROLLUP_AFTER", str(24 * 3600), minimum=0)
# While a run is live, its per-second label rows older than this (before its last second) are rolled
# up as it goes (results.rollup.live_rollup): the live pages read only the last minutes per second.
PLIMSOLL_LIVE_ROLLUP_AFTER = envint("PLIMSOLL_LIVE_ROLLUP_AFTER", "900", minimum=300)

# --- E-mail, sign-up and share links (issue 13) ---
# SMTP when EMAIL_HOST is set; otherwise every mail is written as a file under var/mail/, so a
# newcomer on the embedded default can read invitations and password resets without a mail server.
EMAIL_HOST = os.environ.get("EMAIL_HOST", "")
if EMAIL_HOST:
    EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    EMAIL_PORT = envint("EMAIL_PORT", "587", minimum=1)
    EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
    EMAIL_HOST_PASSWORD = envsecret("EMAIL_HOST_PASSWORD", "")
    EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", "true")
    EMAIL_TIMEOUT = 30
else:
    EMAIL_BACKEND = "portal.notifications.backends.OneFilePerMailBackend"
    # Without an SMTP host, each mail is a file here (PLIMSOLL_MAIL_DIR moves it, e.g. a test's own folder).
    EMAIL_FILE_PATH = Path(os.environ.get("PLIMSOLL_MAIL_DIR") or VAR_DIR / "mail")
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "Plimsoll <plimsoll@localhost>")
# Anyone may create an account at /signup/ when PLIMSOLL_SIGNUP=true (invitations work either way). Off by
# default unless DEBUG is on (issue 30: anyone could make themselves an editor of a team of their own).
PLIMSOLL_SIGNUP = envbool("PLIMSOLL_SIGNUP", "true" if DEBUG else "false")
# Abuse limits (issue 30), counted in the shared cache by portal.limits: sign-ups per client address an
# hour; password-reset mails per address and reset requests per client address an hour; invitations per
# team, per inviting user and per invited address (over the site) a day.
PLIMSOLL_SIGNUPS_PER_CLIENT_HOUR = envint("PLIMSOLL_SIGNUPS_PER_CLIENT_HOUR", "5", minimum=1)
PLIMSOLL_RESET_MAILS_PER_ADDRESS_HOUR = envint("PLIMSOLL_RESET_MAILS_PER_ADDRESS_HOUR", "3", minimum=1)
PLIMSOLL_RESET_REQUESTS_PER_CLIENT_HOUR = envint("PLIMSOLL_RESET_REQUESTS_PER_CLIENT_HOUR", "10", minimum=1)
PLIMSOLL_INVITATIONS_PER_TEAM_DAY = envint("PLIMSOLL_INVITATIONS_PER_TEAM_DAY", "30", minimum=1)
PLIMSOLL_INVITATIONS_PER_USER_DAY = envint("PLIMSOLL_INVITATIONS_PER_USER_DAY", "50", minimum=1)
PLIMSOLL_INVITATIONS_PER_ADDRESS_DAY = envint("PLIMSOLL_INVITATIONS_PER_ADDRESS_DAY", "5", minimum=1)
# E-mail channels (issue 30: no open relay): an address gets mail only once confirmed through a link; mail
# is limited per recipient and per team an hour, confirmation mails per address a day and per user an
# hour, Send test per user an hour (portal/notifications/addresses.py).
PLIMSOLL_MAIL_PER_RECIPIENT_HOUR = envint("PLIMSOLL_MAIL_PER_RECIPIENT_HOUR", "30", minimum=1)
PLIMSOLL_MAIL_PER_TEAM_HOUR = envint("PLIMSOLL_MAIL_PER_TEAM_HOUR", "200", minimum=1)
PLIMSOLL_MAIL_CONFIRMATIONS_PER_ADDRESS_DAY = envint("PLIMSOLL_MAIL_CONFIRMATIONS_PER_ADDRESS_DAY", "3", minimum=1)
PLIMSOLL_MAIL_CONFIRMATIONS_PER_USER_HOUR = envint("PLIMSOLL_MAIL_CONFIRMATIONS_PER_USER_HOUR", "20", minimum=1)
PLIMSOLL_CHANNEL_TESTS_PER_USER_HOUR = envint("PLIMSOLL_CHANNEL_TESTS_PER_USER_HOUR", "10", minimum=1)
TEMPLATES[0]["OPTIONS"]["context_processors"].append("portal.accounts.context_processors.signup")
PASSWORD_RESET_TIMEOUT = 3 * 3600  # a reset link is good for three hours

# -- shard handoff (issue 17) --
# A shard released by a stopping worker (or lost) waits this long for another worker to take it over;
# then it ends interrupted (or lost) and its run partial.
PLIMSOLL_HANDOFF_GRACE = envint("PLIMSOLL_HANDOFF_GRACE", "120", minimum=5)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # Issue 28: a 403 is one line ("Forbidden (Permission denied): /projects/new/"), not a traceback.
    "filters": {"forbidden_one_line": {"()": "portal.log_filters.ForbiddenWithoutTraceback"}},
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django.request": {"filters": ["forbidden_one_line"]}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}

# --- Imports (issue 18) ---
# A HAR uploaded for import waits under VAR_DIR/har-uploads while its preview is open; it is deleted on
# confirmation or discard, and an abandoned one after this many seconds (by the next upload and by beat).
PLIMSOLL_HAR_UPLOAD_TTL_S = envint("PLIMSOLL_HAR_UPLOAD_TTL_S", "3600", minimum=60)
# The largest HAR file accepted, in MB.
PLIMSOLL_HAR_MAX_MB = envint("PLIMSOLL_HAR_MAX_MB", "50", minimum=1)
# The most JSON values and members a HAR may hold, counted before it is parsed (issue 30: 50 MB of "[],[],…"
# parsed to 1.3 GB; a value costs 32 to 64 bytes parsed). Playwright's compact 50 MB recording holds 4.7 M.
PLIMSOLL_HAR_MAX_JSON_VALUES = envint("PLIMSOLL_HAR_MAX_JSON_VALUES", "6000000", minimum=10_000)
# A HAR larger than this (MB) is analysed by a background task (har_analysis_task), its preview page
# waiting for it, instead of in the web request (issue 30: a 30 MB recording takes seconds to analyse).
PLIMSOLL_HAR_INLINE_MB = envint("PLIMSOLL_HAR_INLINE_MB", "5", minimum=0)
# The largest result file (k6, JMeter, Locust, Gatling; gzipped or not) accepted by upload (page and API), in MB.
# Uploads are imported by a background task (result_import_task) in bounded memory, whatever their size.
PLIMSOLL_RESULT_UPLOAD_MAX_MB = envint("PLIMSOLL_RESULT_UPLOAD_MAX_MB", "2048", minimum=1)
# What a result file may hold (issue 30: 1 MB of gzip held a 1 GiB line; an XML JTL 40 M elements): a file over
# one of these is refused with the limit named and nothing created (portal/runs/result_files/, docs/security.md).
# One line (a sample a line: under a kilobyte), one CSV field (a failure message, a URL), the size a gzipped file
# may expand to, how many times its gzipped size (checked once the first ALLOWANCE MB are read: result files
# compress 5 to 30 times), XML nesting (a JTL nests 5 or 6) and the XML elements of one sample.
PLIMSOLL_IMPORT_MAX_LINE_MB = envint("PLIMSOLL_IMPORT_MAX_LINE_MB", "8", minimum=1)
PLIMSOLL_IMPORT_MAX_FIELD_KB = envint("PLIMSOLL_IMPORT_MAX_FIELD_KB", "128", minimum=1)
PLIMSOLL_IMPORT_MAX_GUNZIPPED_GB = envint("PLIMSOLL_IMPORT_MAX_GUNZIPPED_GB", "64", minimum=1)
PLIMSOLL_IMPORT_MAX_EXPANSION = envint("PLIMSOLL_IMPORT_MAX_EXPANSION", "100", minimum=2)
PLIMSOLL_IMPORT_EXPANSION_ALLOWANCE_MB = envint("PLIMSOLL_IMPORT_EXPANSION_ALLOWANCE_MB", "16", minimum=1)
PLIMSOLL_IMPORT_MAX_XML_DEPTH = envint("PLIMSOLL_IMPORT_MAX_XML_DEPTH", "32", minimum=8)
PLIMSOLL_IMPORT_MAX_SAMPLE_ELEMENTS = envint("PLIMSOLL_IMPORT_MAX_SAMPLE_ELEMENTS", "100000", minimum=100)

# Issue 29: Plimsoll's own /metrics (portal/runs/exporter.py) names every team's running plans, so it
# answers a scrape with this bearer token, or one from these networks (default: loopback only).
PLIMSOLL_METRICS_TOKEN = envsecret("PLIMSOLL_METRICS_TOKEN", "")
try:
    PLIMSOLL_METRICS_ALLOW = [
        ipaddress.ip_network(n.strip(), strict=False)
        for n in os.environ.get("PLIMSOLL_METRICS_ALLOW", "127.0.0.0/8,::1").split(",")
        if n.strip()
    ]
except ValueError as exc:
    raise ImproperlyConfigured(f"PLIMSOLL_METRICS_ALLOW: {exc} (expected networks: 10.0.0.0/8,::1)") from None

# Issue 30: where the portal's own requests may go - webhooks, metrics scrapes and tuning changes'
# hooks (portal/outbound.py) - an allowlist of their own. With DEBUG on (a checkout) it is the
# load-target default, loopback; with DEBUG off it allows nothing until the operator names the
# chat, CI and exporter hosts: loopback in a deployment is the portal's own machine.
# PLIMSOLL_WEBHOOK_ALLOWED is its former name, still read.
PLIMSOLL_OUTBOUND_ALLOWED = os.environ.get(
    "PLIMSOLL_OUTBOUND_ALLOWED",
    os.environ.get("PLIMSOLL_WEBHOOK_ALLOWED", "127.0.0.0/8,::1/128,localhost" if DEBUG else ""),
)
try:
    parse_allowlist(PLIMSOLL_OUTBOUND_ALLOWED)
except ValueError as exc:
    raise ImproperlyConfigured(f"PLIMSOLL_OUTBOUND_ALLOWED: {exc}") from None


def _endpoint(url: str, default_port: int) -> tuple[str, int] | None:
    """(host, port) of a service URL; None for a file or socket path."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        return (parts.hostname, parts.port or default_port) if parts.hostname else None
    except ValueError:
        return None


def _site_services() -> list[tuple[str, int]]:
    """Every host:port the site itself uses: no outbound request or load test may reach them."""
    found = []
    for db in DATABASES.values():
        host = str(db.get("HOST") or "")
        if host and not host.startswith("/"):
            found.append((host, int(db.get("PORT") or 5432)))
    for url in (CELERY_BROKER_URL, PLIMSOLL_CACHE_URL):
        if url.startswith(("redis://", "rediss://")):
            found.append(_endpoint(url, 6379))
    if EMAIL_HOST:
        found.append((EMAIL_HOST, EMAIL_PORT))
    found.append(_endpoint(SITE_URL, 443 if SITE_URL.startswith("https:") else 80))
    # The port the portal is served on (Procfile's PLIMSOLL_PORT; docker binds 0.0.0.0:8000), on every local address.
    found.append(("0.0.0.0", envint("PLIMSOLL_PORT", "8000", minimum=1)))
    for item in os.environ.get("PLIMSOLL_DENIED_SERVICES", "").split(","):
        if item.strip():
            endpoint = _endpoint(f"//{item.strip()}", 0)
            if endpoint is None or not endpoint[1]:
                raise ImproperlyConfigured(f"PLIMSOLL_DENIED_SERVICES: {item.strip()!r} is not host:port")
            found.append(endpoint)
    return list(dict.fromkeys(e for e in found if e))


# The site's own services (database, broker, cache, mail server, its own address and port), plus
# PLIMSOLL_DENIED_SERVICES ("host:port,…" for others, such as an exporter beside the portal): every
# outbound request and every load test refuses them whatever the allowlists say (workers/engine/targets.py).
PLIMSOLL_SITE_SERVICES = _site_services()
