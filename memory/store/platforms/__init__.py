"""What the gateway keeps about the platforms' traffic, apart from sessions and memory: the journal of
inbound events and outbound sends, recent unaddressed group messages, and each platform
conversation's own state (the address a platform answers at, when its person last wrote)."""
