"""The audit trail in the store: every event row linked into its tenant's hash chain (`chain`),
the trail's reads for ListEvents and for verification (`reads`), and the verification itself
(`check`)."""
