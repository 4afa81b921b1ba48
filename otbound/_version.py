"""otbound's version, written here only: ``otbound.__version__`` and ``pyproject.toml`` read it."""

__version__ = "0.1.0"
