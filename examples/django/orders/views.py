"""JSON views: one enqueues a task, the others read what the worker wrote, through the ORM."""

from celery.utils import uuid
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST
from django_celery_results.models import TaskResult

from .models import Heartbeat, Order
from .tasks import compute_total


class Rejected(Exception):
    """The example's stand-in for a view that fails after it enqueued: its transaction rolls
    back, and the task with it."""


@csrf_exempt  # an API endpoint for the example's client; keep CSRF on for browser forms
@require_POST
def create_order(request: HttpRequest) -> JsonResponse:
    task_id = uuid()
    try:
        with transaction.atomic():
            order = Order.objects.create(
                quantity=int(request.POST["quantity"]),
                unit_price_cents=int(request.POST["unit_price_cents"]),
            )
            # Written in this transaction (the transport option django_atomic): the task
            # exists exactly when the order does — no on_commit, no window in which a
            # crash loses the task, no worker that looks before the order is committed.
            compute_total.apply_async((order.pk,), task_id=task_id)
            if request.POST.get("reject"):
                raise Rejected
    except Rejected:
        return JsonResponse({"rejected": True, "task_id": task_id}, status=409)
    return JsonResponse({"order_id": order.pk, "task_id": task_id}, status=202)


@require_GET
def order_detail(request: HttpRequest, order_id: int) -> JsonResponse:
    order = get_object_or_404(Order, pk=order_id)
    return JsonResponse({"order_id": order.pk, "total_cents": order.total_cents})


@require_GET
def task_status(request: HttpRequest, task_id: str) -> JsonResponse:
    found = TaskResult.objects.filter(task_id=task_id).first()  # django-celery-results' row
    if found is None:
        return JsonResponse({"task_id": task_id, "status": "PENDING"})
    return JsonResponse(
        {
            "task_id": task_id,
            "status": found.status,
            "result": found.result,
            "task_name": found.task_name,
            "worker": found.worker,
        }
    )


@require_GET
def heartbeats(request: HttpRequest) -> JsonResponse:
    return JsonResponse(
        {
            "count": Heartbeat.objects.count(),
            "workers": sorted(set(Heartbeat.objects.values_list("worker", flat=True))),
        }
    )
