"""Version 1 of the gRPC contracts between Naga's processes.

Everything here except this file is generated from ``proto/naga/v1/*.proto``
by ``scripts/gen_proto.py`` and committed; do not edit it by hand. The
``.pyi`` stubs beside each module are what type checkers read. A test fails
when the generated files are out of date with the ``.proto`` sources.
"""
