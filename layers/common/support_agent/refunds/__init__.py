"""The refund, as one idea: its key's grammar first (keys.py); the rest of its house moves here next."""
