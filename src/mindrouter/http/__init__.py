"""HTTP edge: thin routes per dialect, error → status mapping, streaming glue."""
