"""Typed scalars as every process carries them in ``naga.v1.Value``.

One conversion for the kernel, the core's services and the SDK, so a value
means the same thing wherever it crosses a process boundary: ``bool`` is
checked before ``int`` (it is an ``int`` subclass), integers must fit the
wire's 64 bits, and nothing but the five scalar types is accepted.
"""

from __future__ import annotations

from naga.v1 import kernel_pb2 as pb

Scalar = str | int | float | bool | bytes


class InvalidValue(ValueError):
    """A value that ``naga.v1.Value`` cannot carry (or a Value with none)."""


def to_value(value: Scalar) -> pb.Value:
    """``value`` as a ``naga.v1.Value``; InvalidValue if it cannot be one."""
    if isinstance(value, bool):
        return pb.Value(flag=value)
    if isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 63):
            raise InvalidValue(f"integer {value} does not fit 64 bits")
        return pb.Value(integer=value)
    if isinstance(value, float):
        return pb.Value(real=value)
    if isinstance(value, str):
        return pb.Value(text=value)
    if isinstance(value, bytes):  # pyright: ignore[reportUnnecessaryIsInstance]
        return pb.Value(raw=value)
    raise InvalidValue(f"unsupported value type {type(value).__name__}")


def from_value(value: pb.Value) -> Scalar:
    """The scalar a ``naga.v1.Value`` holds; InvalidValue if it holds none."""
    which = value.WhichOneof("kind")
    if which is None:
        raise InvalidValue("value has no kind")
    result: Scalar = getattr(value, which)
    return result


__all__ = ["InvalidValue", "Scalar", "from_value", "to_value"]
