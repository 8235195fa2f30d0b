"""The plugins shipped with Naga, one directory each with its ``plugin.toml``.

The core discovers them here (and in ``$NAGA_HOME/plugins``); none is
enabled until the owner enables it (``naga plugin enable NAME``).
"""
