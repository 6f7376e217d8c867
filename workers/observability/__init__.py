"""Metrics and traces: Prometheus metrics of a process and OpenTelemetry spans."""
