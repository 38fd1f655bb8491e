"""What providers send on their own: the webhook listener (its own port, HTTP or HTTPS)."""

from __future__ import annotations

from effectgate.gateway.intake.webhooks import WebhookIntake, adapter_tenants

__all__ = ["WebhookIntake", "adapter_tenants"]
