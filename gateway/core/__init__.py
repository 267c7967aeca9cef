"""The small shared vocabulary: events, the adapter port, logs, metrics, probe findings, splitting, HTTP input."""
