"""A Flask app with Celery wired the way Flask's docs describe, on the SQLite default.

``create_app()`` reads ``app.config["CELERY"]`` — the broker and the result backend are two
SQLite files in the app's instance folder unless ``FLASK_CELERY__broker_url`` /
``FLASK_CELERY__result_backend`` say otherwise (``app.config.from_prefixed_env()``).
"""

from __future__ import annotations

from pathlib import Path

from celery import Celery, Task
from flask import Flask


def celery_init_app(app: Flask) -> Celery:
    """Flask's pattern: every task runs inside the app's context, the app is the default."""

    class FlaskTask(Task):
        def __call__(self, *args: object, **kwargs: object) -> object:
            with app.app_context():
                return self.run(*args, **kwargs)

    celery_app = Celery(app.name, task_cls=FlaskTask)
    celery_app.config_from_object(app.config["CELERY"])
    celery_app.set_default()
    app.extensions["celery"] = celery_app
    return celery_app


def create_app() -> Flask:
    app = Flask(__name__)
    instance = Path(app.instance_path)
    instance.mkdir(parents=True, exist_ok=True)
    app.config.from_mapping(
        GREETING="Hello",
        CELERY={
            # the only lines that differ from the Redis setup in Flask's docs
            "broker_url": f"sqlqueue+sqlite:///{instance / 'queue.db'}",
            "result_backend": f"db+sqlite:///{instance / 'results.db'}",
            "task_ignore_result": True,
            "task_acks_late": True,
            "task_reject_on_worker_lost": True,
            "broker_connection_retry_on_startup": True,
        },
    )
    app.config.from_prefixed_env()  # FLASK_CELERY__broker_url=… overrides one key
    celery_init_app(app)

    from . import views

    app.register_blueprint(views.bp)
    return app
