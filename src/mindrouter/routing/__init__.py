"""Pure routing: which models exist, which backends serve them, and which backend to pick."""
