"""Work nobody asks for: recovery (the reconciler), retention, readiness, metric watchers."""
