from celery import shared_task

from .models import Heartbeat, Order


@shared_task
def compute_total(order_id: int) -> int:
    order = Order.objects.get(pk=order_id)
    order.total_cents = order.quantity * order.unit_price_cents
    order.save(update_fields=["total_cents"])
    return order.total_cents


@shared_task(bind=True)
def heartbeat(self) -> str:
    # unique task_id: a tick that ran twice would fail here, not count twice
    Heartbeat.objects.create(task_id=self.request.id, worker=self.request.hostname)
    return str(self.request.id)
