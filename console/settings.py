"""Settings of the console. Every value comes from the environment (see docs/operator/configuration.md, .env.example)."""

from __future__ import annotations

import re
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from jobs.nodes.liveness import settings_problem

from .env import database_from_url, env_bool, env_int, env_list, env_secret, env_str

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_secret("SECRET_KEY", "dev-insecure-change-me" if DEBUG else "")
if not SECRET_KEY:
    # zero-setup default: a key kept on disk beside the database, created once
    _key_file = BASE_DIR / ".secret_key"
    if not _key_file.exists():
        import secrets

        _key_file.write_text(secrets.token_urlsafe(50))
        _key_file.chmod(0o600)
    SECRET_KEY = _key_file.read_text().strip()

# Fernet key for registry passwords; derived from SECRET_KEY when unset.
FIELD_ENCRYPTION_KEY = env_secret("FIELD_ENCRYPTION_KEY", "")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "channels",
    "console",
    "jobs",
    "jobs.slurm",
    "workspaces",
    "monitoring",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # every page needs a login; the API answers 401/403 through DRF instead of a redirect
    "console.middleware.LoginRequiredExceptApiMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "console.urls"
ASGI_APPLICATION = "console.asgi.application"

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

DATABASES = {"default": database_from_url(env_str("DATABASE_URL"), BASE_DIR)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # redis-py 8 reads with a 5 s socket timeout, the same as channels_redis' blocking
            # pop: an idle consumer would time out and drop its WebSocket. Give reads room.
            # a fleet connecting or dropping at once uses many connections for a moment
            "hosts": [{"address": REDIS_URL, "socket_timeout": 30,
                       "max_connections": env_int("CHANNEL_LAYER_MAX_CONNECTIONS", 1000, minimum=64)}],
            "prefix": env_str("CHANNELS_PREFIX", "simpleai"),
            # every socket of one console process shares one Redis queue and this bound: a
            # scheduler run pushes the desired state of hundreds of nodes at once, and what goes
            # over it is dropped (channels_redis' default, 100, dropped pushes to a fleet)
            "capacity": env_int("CHANNEL_LAYER_CAPACITY", 20_000, minimum=100),
        },
    }
}

CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# node liveness and failover assessments never wait behind other work (console/services/processes.py).
# Every queue is declared, so a worker started without -Q (`celery -A console worker`, as any
# deployment starts one) consumes them all: an undeclared watchdog queue was served only by
# workers told its name, and a console deployed the ordinary way never noticed a dead node.
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_QUEUES: dict[str, dict[str, str]] = {"celery": {}, "watchdog": {}}
CELERY_TASK_ROUTES = {
    "jobs.tasks.watch_heartbeats": {"queue": "watchdog"},
    "jobs.tasks.finish_failover_assessments": {"queue": "watchdog"},
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [
    BASE_DIR / "static",
    # plotly.js as the `plotly` package ships it (/static/vendor/plotly/plotly.min.js): no CDN,
    # and no 4 MB copy in the repository
    ("vendor/plotly", Path(str(__import__("plotly").__file__)).parent / "package_data"),
]
STATIC_ROOT = BASE_DIR / "staticfiles"
SERVE_STATIC = env_bool("SERVE_STATIC", True)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # token first: an unauthenticated call gets 401 with `WWW-Authenticate: Token` (DRF answers
        # with the first class's challenge), not a bare 403; every API view of every app uses these
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # DRF's, refusing an empty, repeated or non-positive `page` (console.lib.api_strict)
    "DEFAULT_PAGINATION_CLASS": "console.lib.api_strict.StrictPageNumberPagination",
    "PAGE_SIZE": 50,
    # drf-spectacular's AutoSchema plus the 400/401/403/404 answers DRF really gives
    "DEFAULT_SCHEMA_CLASS": "console.lib.api_schema.ConsoleAutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Simple AI Training API",
    "DESCRIPTION": (
        "Training Jobs with their logs, metrics and cost; Training Workspaces; server types; "
        "and, for staff, node operations (fault injection, spot reclaim)."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    # Swagger UI assets served locally (no CDN)
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # request bodies as their own components (TrainingJobRequest): what a client may send is
    # declared apart from what it reads back, with the rules the API enforces (jobs.api.schema)
    "COMPONENT_SPLIT_REQUEST": True,
    # JSON bodies only: the API's clients send JSON; form bodies (the browsable API's) are not
    # offered, since nullable integers and lists of tags do not survive them
    "PARSER_WHITELIST": ["rest_framework.parsers.JSONParser"],
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "jobs.api.schema.declare_job_rules"],
}

# Object storage (S3-compatible): scripts are read from it, outputs written to it.
S3_ENDPOINT_URL = env_str("S3_ENDPOINT_URL", "")
S3_ACCESS_KEY = env_secret("S3_ACCESS_KEY", "")
S3_SECRET_KEY = env_secret("S3_SECRET_KEY", "")
# Before tenant storage spaces every job's outputs went here; `manage.py storage_spaces
# --provision-all` copies what existing jobs own from it into their owners' buckets (upgrade)
S3_RESULTS_BUCKET = env_str("S3_RESULTS_BUCKET", "simpleai-results")
# Each user's storage space is the bucket <prefix>-u<user id> (jobs.storage); the console's own
# keys above never leave the console: users and attempts get keys of their own
S3_TENANT_BUCKET_PREFIX = env_str("S3_TENANT_BUCKET_PREFIX", "simpleai")
if not re.fullmatch(r"[a-z0-9][a-z0-9-]{1,40}", S3_TENANT_BUCKET_PREFIX):
    raise ImproperlyConfigured("S3_TENANT_BUCKET_PREFIX must be 2 to 41 lowercase letters, digits or '-'")
# the most one upload through the account page may carry (megabytes)
STORAGE_UPLOAD_MAX_MB = env_int("STORAGE_UPLOAD_MAX_MB", 1024, minimum=1)
# how often beat revokes the credentials of attempts that ended (and removes left-over identities)
STORAGE_SWEEP_SECONDS = env_int("STORAGE_SWEEP_SECONDS", 30, minimum=5)

JOBS_PAGE_SIZE = env_int("JOBS_PAGE_SIZE", 20, minimum=1)

# Nodes: a node that stops sending heartbeats is declared Lost within this long (jobs.nodes.liveness).
# 10 s: a dead node's jobs move on within 10 s of its last beat; at 1,000 nodes a live node still
# has 3.5 s of slack on top of a beat, and more while the console reads late (jobs.nodes.liveness)
NODE_LOST_AFTER_SECONDS = env_int("NODE_LOST_AFTER_SECONDS", 10, minimum=5)
# how often agents beat (the console tells them in its welcome): each beat costs the console
# ~0.6 ms of CPU, so a fleet of 1,000 at 2 s takes about 0.3 of a core; at least 3 per grace
NODE_HEARTBEAT_SECONDS = env_int("NODE_HEARTBEAT_SECONDS", 2, minimum=1)
# a node whose agent's connection closed without the console asking (its process ended, its
# machine reset the connection) is declared Lost this long after, unless it connected again
# meanwhile (an agent whose connection merely blipped is back within its first backoff, < 1 s)
NODE_CLOSED_GRACE_SECONDS = env_int("NODE_CLOSED_GRACE_SECONDS", 2, minimum=0)
# an agent cut off from the console keeps its jobs running this long before it stops them
# (jobs.nodes.registry.fence_after_seconds): outages of the console or its stores up to it cost nothing
NODE_FENCE_AFTER_SECONDS = env_int("NODE_FENCE_AFTER_SECONDS", 300, minimum=10)
# SIGTERM → this many seconds → SIGKILL when a job is stopped or deleted
JOB_STOP_GRACE_SECONDS = env_int("JOB_STOP_GRACE_SECONDS", 30, minimum=0)
# partial recovery (jobs.regang): a resumed multi-node job keeps its healthy nodes at their ranks
# and their agents reuse what they prepared for the interrupted attempt; 0: every resume is
# placed and prepared like a new job (the benchmark's "before")
PARTIAL_RECOVERY = env_int("PARTIAL_RECOVERY", 1, minimum=0) > 0
# how often beat runs the scheduler and the heartbeat watchdog (seconds)
SCHEDULER_TICK_SECONDS = env_int("SCHEDULER_TICK_SECONDS", 5, minimum=1)
# a scheduler run starts at least this long after the previous one ended (milliseconds): a
# burst of events meanwhile (a fleet finishing jobs) is one run that sees them all, not one each
SCHEDULER_MIN_GAP_MS = env_int("SCHEDULER_MIN_GAP_MS", 500, minimum=0)
# transactions of a console process storing agents' messages at once (each takes what many nodes
# handed over meanwhile: jobs.channel.gather); two, so that one waiting on a row lock does not stop the
# rest; more take the GIL from the event loop and wait on each other's job rows
AGENT_STORE_THREADS = env_int("AGENT_STORE_THREADS", 2, minimum=1)
# how often the watchdog looks for nodes past their grace (one indexed query)
NODE_WATCH_SECONDS = env_int("NODE_WATCH_SECONDS", 1, minimum=1)
if (_liveness_problem := settings_problem(NODE_LOST_AFTER_SECONDS, NODE_WATCH_SECONDS, NODE_HEARTBEAT_SECONDS)):
    raise ImproperlyConfigured(_liveness_problem)

CELERY_BEAT_SCHEDULE = {
    "schedule-jobs": {"task": "jobs.tasks.scheduler_tick", "schedule": float(SCHEDULER_TICK_SECONDS)},
    "watch-heartbeats": {"task": "jobs.tasks.watch_heartbeats", "schedule": float(NODE_WATCH_SECONDS)},
    "finish-failover-assessments": {"task": "jobs.tasks.finish_failover_assessments", "schedule": float(SCHEDULER_TICK_SECONDS)},
}

# Metrics: raw samples are kept this many days, their 5-minute roll-ups this many; beat rolls
# up every METRICS_ROLLUP_INTERVAL_SECONDS and applies retention hourly (monitoring.tasks).
METRICS_RAW_RETENTION_DAYS = env_int("METRICS_RAW_RETENTION_DAYS", 7, minimum=1)
METRICS_ROLLUP_RETENTION_DAYS = env_int("METRICS_ROLLUP_RETENTION_DAYS", 90, minimum=1)
METRICS_ROLLUP_INTERVAL_SECONDS = env_int("METRICS_ROLLUP_INTERVAL_SECONDS", 60, minimum=5)
CELERY_BEAT_SCHEDULE["rollup-metrics"] = {"task": "monitoring.tasks.rollup_metrics", "schedule": float(METRICS_ROLLUP_INTERVAL_SECONDS)}
CELERY_BEAT_SCHEDULE["purge-metrics"] = {"task": "monitoring.tasks.purge_metrics", "schedule": 3600.0}

# Training Workspaces and the warm pool: a job's nodes stay warm for its keep-alive (default 10
# minutes, at most this many); beat reserves and releases workspace nodes every scheduler tick.
WARM_POOL_MAX_KEEP_ALIVE_MINUTES = env_int("WARM_POOL_MAX_KEEP_ALIVE_MINUTES", 60, minimum=0)
# Slurm clusters (jobs.slurm): submit waiting jobs and follow Slurm's states every scheduler tick.
CELERY_BEAT_SCHEDULE["sync-slurm"] = {"task": "jobs.slurm.tasks.sync_slurm", "schedule": float(SCHEDULER_TICK_SECONDS)}
CELERY_BEAT_SCHEDULE["reconcile-workspaces"] = {"task": "workspaces.tasks.reconcile_workspaces", "schedule": float(SCHEDULER_TICK_SECONDS)}
CELERY_BEAT_SCHEDULE["sweep-storage-credentials"] = {"task": "jobs.tasks.sweep_storage_credentials", "schedule": float(STORAGE_SWEEP_SECONDS)}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"daphne": {"level": "WARNING"}, "django.channels.server": {"level": "WARNING"}},
}
