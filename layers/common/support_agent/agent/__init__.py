"""The turn: a bounded tool-use loop that persists every step before acting on it."""
