"""Service benchmarks (issue 7): queue latency, polling under load, overhead, growth."""
