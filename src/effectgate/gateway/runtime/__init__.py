"""The process: the server that composes the wings, the worker pool, the command line."""
