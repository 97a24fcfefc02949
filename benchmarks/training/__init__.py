"""Training speed: the worker's loop against faithful re-implementations of the seed loops."""
