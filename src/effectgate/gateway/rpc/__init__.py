"""None"""

from __future__ import annotations

from effectgate.gateway.rpc.admission import Admission
from effectgate.gateway.rpc.agent_service import EffectGatewayService
from effectgate.gateway.rpc.auth import Authenticator
from effectgate.gateway.rpc.limits import Limits
from effectgate.gateway.rpc.operator_service import OperatorService
from effectgate.gateway.rpc.status import to_status

__all__ = [
    "Admission",
    "Authenticator",
    "EffectGatewayService",
    "Limits",
    "OperatorService",
    "to_status",
]
