"""The generic HTTP adapter: a provider described entirely in the config file."""

from effectgate.adapters.http.adapter import HttpAdapter
from effectgate.adapters.http.settings import HttpSettings, RequestSpec

__all__ = ["HttpAdapter", "HttpSettings", "RequestSpec"]
