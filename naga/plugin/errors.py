"""Errors of the plugin contracts: a manifest, a call's arguments, a frame.

``naga`` cannot import ``naga_core`` (plugins import this package too), so
the root :class:`PluginContractError` mirrors ``naga_core.errors.NagaError``
instead of deriving from it; the core translates these where it meets them.
"""

from __future__ import annotations

from collections.abc import Sequence


class PluginContractError(Exception):
    """Root of every error ``naga.plugin`` raises on purpose."""


class ManifestInvalid(PluginContractError, ValueError):
    """A plugin manifest does not validate. ``problems`` has one line per
    bad field (``tools[0].risk: ...``); ``source`` names the file."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = tuple(problems)
        super().__init__(f"{source}: " + "; ".join(self.problems))


class InvalidArguments(PluginContractError, ValueError):
    """A tool call's arguments do not match the tool's params; the message
    names the tool and the argument."""


class FrameError(PluginContractError):
    """Bytes on the plugin wire are not a well-formed frame (too large,
    cut short, not the message they must be)."""


__all__ = ["FrameError", "InvalidArguments", "ManifestInvalid", "PluginContractError"]
