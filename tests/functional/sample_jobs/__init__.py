"""Jobs that exist only for tests: they make failures happen on demand and count their side effects."""
