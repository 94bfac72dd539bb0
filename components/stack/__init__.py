"""What the user writes and what is derived from it: config models and checks, catalog, pins, names (no resources)."""
