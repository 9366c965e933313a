"""The request pipeline: the stages between a decoded request and its backend (DESIGN.md §1)."""
