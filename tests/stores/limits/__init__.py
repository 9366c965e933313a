"""Tests for the per-user limit stores (memory and Redis)."""
