"""Telegram channel: python-telegram-bot adapter, pure normalize/render, error mapping.

The SDK is imported only by adapter.py, errors.py and probe.py (doctor's check, inside its function);
normalize.py and render.py are pure.
"""
