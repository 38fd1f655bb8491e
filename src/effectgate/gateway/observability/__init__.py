"""Traces, metrics, audit lines and log formatting: called by one-line hooks, never deciding anything."""
