"""SMTP email (`SendEmail`): a Message-ID from the action id, an IMAP search as the read-back."""

from effectgate.adapters.smtp.adapter import SmtpAdapter, SmtpSettings
from effectgate.adapters.smtp.imap_lookup import ImapSettings

__all__ = ["ImapSettings", "SmtpAdapter", "SmtpSettings"]
