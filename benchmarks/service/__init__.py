"""Service benchmarks: queue latency, polling under load, overhead, growth."""
