"""Chat commands, the same on every channel, each checked against the sender's role."""
