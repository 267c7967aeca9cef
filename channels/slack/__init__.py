"""Slack channel: Socket Mode or HTTP Events API through slack-bolt (imported only in adapter.py)."""
