"""The small shared vocabulary everyone may import: events, the adapter port, logs, metrics, probe
findings, message splitting, HTTP input, and what every channel config shares. It imports nothing
else of the project."""
