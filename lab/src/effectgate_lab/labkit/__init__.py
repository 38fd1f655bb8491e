"""Shared pieces of the laboratory (benchmarks, chaos harness, tests): child processes, a
throw-away PostgreSQL cluster, a command's working directory."""
