"""The generic HTTP adapter: a provider described entirely in the config file."""
