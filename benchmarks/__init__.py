"""xkernels benchmark suite: `python -m benchmarks.run [--quick]`."""
