"""A target whose import raises: the launcher reports the target layer."""

raise ImportError("this module refuses to load")
