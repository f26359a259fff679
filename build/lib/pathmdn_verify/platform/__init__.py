"""The platform: what connects the pure core to a machine and a kernel package (the interpreter fidelity layer,
tile configs, compile timing, kernel roots, the environment, planted bugs)."""
