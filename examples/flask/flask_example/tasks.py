"""The app's tasks: ``shared_task`` binds them to the app ``celery_init_app`` made default."""

from __future__ import annotations

from celery import shared_task
from flask import current_app


@shared_task(ignore_result=False)
def add(a: int, b: int) -> int:
    return a + b


@shared_task(ignore_result=False)
def greet(name: str) -> str:
    # current_app works here because FlaskTask runs each task in the app's context
    return f"{current_app.config['GREETING']}, {name}!"
