"""The backends: each one's client, health, circuit breaker and cache view."""
