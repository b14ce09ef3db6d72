"""The support inbox's own logic: what a person reads of a hand-off before and while they answer it."""
