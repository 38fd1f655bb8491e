"""Postmark email (`SendEmail`): its HTTP API, with a metadata search as the read-back."""
