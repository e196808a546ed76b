"""The package version: the one definition (the tuner's cache keys and pyproject.toml read it)."""
__version__ = "0.1.0"
