"""The config model and its loader (each channel's own config model lives in its channel package)."""
