"""Stripe payments (`ChargeCard`): the official SDK, with its retries off."""
