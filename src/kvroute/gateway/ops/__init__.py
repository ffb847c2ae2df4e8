"""Operating the gateway: metrics, the Prometheus text format, structured logs."""
