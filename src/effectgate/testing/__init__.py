"""A test kit for the effect protocol, in-process and in virtual time.

- `FakeClock`: a clock whose `sleep` advances virtual time (and yields once to the loop);
- `ScriptedAdapter`: a provider model (effects, idempotency keys, read-after-write lag) whose
  answers to execute and verify can be scripted one by one (receipts, errors, lost answers,
  hangs, observations);
- `MemoryStore`: the Store ABC in memory, with its fence and due-work semantics, sharable by
  several "replicas" and able to fail on demand;
- `Rig`: a protocol, its operations and its reconciler wired on the three.
"""

from effectgate.testing.adapter import Hang, Lost, ScriptedAdapter
from effectgate.testing.clock import FakeClock
from effectgate.testing.rig import CHARGE, Rig, command, rig
from effectgate.testing.store import MemoryDatabase, MemoryStore

__all__ = [
    "CHARGE",
    "FakeClock",
    "Hang",
    "Lost",
    "MemoryDatabase",
    "MemoryStore",
    "Rig",
    "ScriptedAdapter",
    "command",
    "rig",
]
