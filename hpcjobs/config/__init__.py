"""Site configs: where they are found, how they are loaded, layered and validated."""
