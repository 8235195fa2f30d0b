"""The tools shipped with Naga (docs/design/tools.md): ``fs`` (the owner's
workspace: read, list, search; staged write, edit, delete), ``shell``
(a command in a sandbox of its own over a staged copy of the workspace) and
``web`` (``web.fetch``: a page through the core's egress proxy, as text).
All are enabled on a fresh install; which of their tools a turn is offered
is ``tools.max_risk`` (default R2) and the peer's trust.
"""
