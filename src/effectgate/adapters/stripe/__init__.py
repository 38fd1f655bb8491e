"""Stripe payments (`ChargeCard`): the official SDK, with its retries off."""

from effectgate.adapters.stripe.adapter import StripeAdapter, StripeSettings

__all__ = ["StripeAdapter", "StripeSettings"]
