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


@csrf_exempt  # an API endpoint for the example's client; keep CSRF on for browser forms
@require_POST
def create_order(request: HttpRequest) -> JsonResponse:
    task_id = uuid()
    with transaction.atomic():
        order = Order.objects.create(
            quantity=int(request.POST["quantity"]),
            unit_price_cents=int(request.POST["unit_price_cents"]),
        )
        # The broker writes on a connection of its own: enqueue once the order is committed,
        # or a fast worker looks for an order that is not there yet (and a rollback would
        # leave a task for an order that never existed). The id is chosen now to return it.
        transaction.on_commit(lambda: compute_total.apply_async((order.pk,), task_id=task_id))
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
