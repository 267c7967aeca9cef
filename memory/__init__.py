"""The memory engine: storage, the archive, long-term records, embeddings and the trust rules they
obey. It imports nothing of the gateway but gateway.core (docs/architecture.md)."""
