"""Package version, kept apart so that reading it imports nothing heavy."""

__version__ = "0.1.0"
