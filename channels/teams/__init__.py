"""Microsoft Teams channel on the Microsoft 365 Agents SDK (docs/teams.md).

adapter.py: the messaging endpoint and the Bot Connector calls; auth.py: the JWT of every incoming
request; token.py: the bot's own token; references.py: where each conversation is answered, kept
across restarts; errors.py: failures as DeliveryError; probe.py: the doctor's check. normalize.py and
render.py are pure. The SDK is imported by adapter.py, auth.py and token.py (probe.py inside its
function), never outside this package.
"""
