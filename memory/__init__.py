"""Everything remembered: storage, sessions, identities, inbound event journal, (later) long-term memory."""
