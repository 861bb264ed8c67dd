from django.db import models


class Order(models.Model):
    quantity = models.PositiveIntegerField()
    unit_price_cents = models.PositiveIntegerField()
    total_cents = models.PositiveIntegerField(null=True)  # written by the task


class Heartbeat(models.Model):
    """One row each time beat's schedule fires and a worker runs the task."""

    task_id = models.CharField(max_length=255, unique=True)
    worker = models.CharField(max_length=255)
    ran_at = models.DateTimeField(auto_now_add=True)
