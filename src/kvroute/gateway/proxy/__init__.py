"""Forwarding a request: the client body checked, sent upstream, the answer relayed."""
