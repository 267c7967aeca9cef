"""Local and provider embeddings, and the vectors recall searches."""
