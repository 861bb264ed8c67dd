"""Python handlers for Laravel job classes: `laravel-bridge work --handlers handlers`."""

from __future__ import annotations

import logging

from laravel_bridge import Job, handles

log = logging.getLogger("example.handlers")


@handles("App\\Jobs\\ResizeImage")
def resize_image(job: Job) -> None:
    """What `App\\Jobs\\ResizeImage::handle()` does in PHP, done in Python."""
    props = job.properties  # {'path': '/img/cat.png', 'width': 640, ...} by plain name
    print(f"resize {props['path']} to {props['width']}px (attempt {job.attempts}, uuid {job.uuid})")


def invoice_failed(properties: dict[str, object], exc: BaseException, uuid: str) -> None:
    """Like a Laravel job's failed(): runs once, when the job fails for good."""
    print(f"invoice {properties['invoiceId']} failed for good: {exc}")


@handles("App\\Jobs\\SendInvoice", on_failure=invoice_failed)
def send_invoice(job: Job) -> None:
    if job.properties.get("email") is None:
        raise ValueError("the invoice has no email address")
    print(f"invoice {job.properties['invoiceId']} sent to {job.properties['email']}")
