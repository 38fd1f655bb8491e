"""`python -m effectgate.gateway`: the `effectgate` command, for environments without its script."""

import sys

from effectgate.gateway.runtime.entry import main

sys.exit(main())
