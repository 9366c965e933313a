"""API keys and the principals they stand for: generation, parsing, hashing, authentication."""
