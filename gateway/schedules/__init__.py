"""Runs nobody typed: reminders, scheduled agent runs and inbound webhooks (docs/schedules.md)."""
