"""The request pipeline: the stages between a decoded request and its backend."""
