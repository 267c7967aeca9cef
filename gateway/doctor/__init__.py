"""`clawgate doctor`: the health checks."""
