"""Settings of the example: the app's data, the broker, results and beat in ONE database.

``DATABASE_URL`` picks it: ``postgresql://user:password@host:5432/shop`` or
``sqlite:////path/to/shop.sqlite3`` (the default: ``shop.sqlite3`` beside manage.py).
The broker is the same database (``sqlqueue+`` in front of the same URL), results go to
django-celery-results' table and the schedule to django-celery-beat's.
"""

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent
DATABASE_URL = os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR / 'shop.sqlite3'}")


def database(url: str) -> dict[str, object]:
    """Django's DATABASES entry for ``url`` (what dj-database-url does, for two engines)."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": url.removeprefix("sqlite:///"),
            "OPTIONS": {
                # the worker, beat and the web process write the one file: wait for the
                # lock rather than fail, take it at BEGIN (no upgrade deadlock), WAL readers
                "timeout": 30,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL",
            },
        }
    if parts.scheme in ("postgresql", "postgres"):
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": parts.path.lstrip("/"),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
        }
    raise ValueError(f"DATABASE_URL: unsupported scheme {parts.scheme!r} (postgresql, sqlite)")


DATABASES = {"default": database(DATABASE_URL)}

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django_celery_results",
    "django_celery_beat",
    "orders",
]
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
ROOT_URLCONF = "shop.urls"
WSGI_APPLICATION = "shop.wsgi.application"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"

# Celery (shop/celery.py reads every CELERY_* setting)
CELERY_BROKER_URL = "sqlqueue+" + DATABASE_URL  # the queue lives in the same database
# django_atomic: a task sent inside transaction.atomic() is written in that transaction
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 60, "django_atomic": "default"}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_RESULT_BACKEND = "django-db"  # django-celery-results: results through the ORM
CELERY_RESULT_EXTENDED = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_TIMEZONE = TIME_ZONE
# django-celery-beat's DatabaseScheduler copies this into its PeriodicTask table at start;
# the admin (or the ORM) can add and change schedules there while beat runs.
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BEAT_SCHEDULE = {
    "heartbeat": {"task": "orders.tasks.heartbeat", "schedule": 2.0},
}
