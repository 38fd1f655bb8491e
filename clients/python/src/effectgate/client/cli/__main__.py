"""`python -m effectgate.client.cli`: the operator commands with only the client installed."""

import sys

from effectgate.client.cli import main

sys.exit(main())
