"""Tests for the fair-share counters shared through Redis."""
