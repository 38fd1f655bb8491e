"""Square payments (`ChargeCard`): the Payments API over plain HTTP (httpx), no SDK."""

from effectgate.adapters.square.adapter import SquareAdapter, SquareSettings

__all__ = ["SquareAdapter", "SquareSettings"]
