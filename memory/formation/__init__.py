"""Memory formed from archived messages: candidates, their sources, proposals."""
