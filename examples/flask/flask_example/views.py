"""Views that start tasks and read their results (Flask's Celery docs, as JSON)."""

from __future__ import annotations

from typing import Any

from celery.result import AsyncResult
from flask import Blueprint, request

from . import tasks

bp = Blueprint("tasks", __name__)


@bp.post("/add")
def start_add() -> dict[str, Any]:
    result = tasks.add.delay(int(request.form["a"]), int(request.form["b"]))
    return {"result_id": result.id}


@bp.post("/greet")
def start_greet() -> dict[str, Any]:
    result = tasks.greet.delay(request.form["name"])
    return {"result_id": result.id}


@bp.get("/result/<id>")
def task_result(id: str) -> dict[str, Any]:
    result = AsyncResult(id)
    return {
        "ready": result.ready(),
        "successful": result.successful() if result.ready() else None,
        "value": result.result if result.ready() else None,
    }
