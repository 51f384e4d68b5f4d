"""What the server tells operators: Prometheus series, per-request logs, dashboard data."""
