"""The part of the protocol that does I/O: the verbs (`execute`: Execute and the drives; `reads`:
verify, get, list; `leases`: lease, commit, release, claim_due), the driver (write, call, write),
the replay cache, and what the verbs share (`parts`)."""
