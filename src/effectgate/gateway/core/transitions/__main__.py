"""`python -m effectgate.gateway.core.transitions` prints the diagram for docs/protocol.md."""

from effectgate.gateway.core.transitions.table import mermaid

print(mermaid())
