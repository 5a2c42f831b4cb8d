"""kakehashi: a command-line client of the Kakehashi portal's REST API (standard library only)."""

__version__ = "0.1.0"
