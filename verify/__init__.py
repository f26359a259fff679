"""verify: numerical verification of PaTH attention and Momentum DeltaNet kernels (CLI and orchestration)."""
