"""Contracts shared by every Naga process: generated protos (``naga.v1``) and
the numbers the design fixes (``naga.constants``).

Nothing here performs I/O or holds state; the core, the gateway and the
plugins all depend on this package and on nothing of each other.
"""
