"""Errors of the model server's sandboxed side (``naga_plugins`` cannot
derive from ``naga_core.errors.NagaError``; the core reads them in the log)."""

from __future__ import annotations


class LocalModelServerError(Exception):
    """Root of what the model server's sandboxed side raises on purpose."""


class BadServerArguments(LocalModelServerError, ValueError):
    """The launcher passed a malformed argument list."""


__all__ = ["BadServerArguments", "LocalModelServerError"]
