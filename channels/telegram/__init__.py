"""Telegram channel: python-telegram-bot adapter, pure normalize/render, error mapping.

The SDK is imported only by adapter.py and errors.py; normalize.py and render.py are pure.
"""
