"""The gateway's picture of each backend's prefix cache, and the keys it is asked with."""
