"""Postmark email (`SendEmail`): its HTTP API, with a metadata search as the read-back."""

from effectgate.adapters.postmark.adapter import PostmarkAdapter, PostmarkSettings

__all__ = ["PostmarkAdapter", "PostmarkSettings"]
