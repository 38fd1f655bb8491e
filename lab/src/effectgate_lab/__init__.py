"""effectgate's laboratory: provider simulators, the chaos harness, the demo and the benchmarks."""
