"""The support policy as versioned data: its model (model.py) and where it is read from (source.py)."""
