"""SMTP email (`SendEmail`): a Message-ID from the action id, an IMAP search as the read-back."""
