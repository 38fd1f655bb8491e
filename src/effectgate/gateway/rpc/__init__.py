"""None"""

from __future__ import annotations

from effectgate.gateway.rpc.admission import Admission, Authenticator, GenericOnly
from effectgate.gateway.rpc.agent_service import EffectGatewayService
from effectgate.gateway.rpc.operator_service import OperatorService
from effectgate.gateway.rpc.status import to_status
from effectgate.gateway.rpc.wire import Limits

__all__ = [
    "Admission",
    "Authenticator",
    "EffectGatewayService",
    "GenericOnly",
    "Limits",
    "OperatorService",
    "to_status",
]
