"""Discord channel (discord.py). Import `channels.discord.adapter` only where the SDK may load."""
