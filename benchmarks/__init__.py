"""`python -m benchmarks`: speed measured against baselines taken in the same run."""
