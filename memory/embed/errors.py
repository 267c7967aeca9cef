"""The one error every embedder raises, apart so the runtimes need not import the embedder factory
that loads them."""


class EmbeddingError(RuntimeError):
    """An embedding provider failed or answered something unusable."""
