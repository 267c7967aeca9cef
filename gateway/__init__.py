"""clawgate: one async process connecting chat platforms to an LLM, with trustworthy memory."""

__version__ = "0.1.0"
