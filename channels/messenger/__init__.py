"""Facebook Messenger channel: Meta's webhook and the Send API over aiohttp (no platform SDK).

adapter.py wires the webhook and the Send API; graph.py is the Graph API client, signature.py the
webhook signature, window.py the 24-hour window, media.py where attachments may be fetched from,
errors.py the mapping of Meta's error codes; normalize.py and render.py are pure. probe.py is
`clawgate doctor`'s check of the Page token.
"""
