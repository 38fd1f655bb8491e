"""Commands that read and mend the store directly, with no gateway running: `effectgate notify`."""
