"""The audit trail in the store: every event row linked into its tenant's hash chain (`chain`),
the trail's reads for ListEvents and for verification (`reads`), the verification itself
(`check`), and the notifications' outbox that reads it (`outbox`)."""
