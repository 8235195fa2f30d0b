"""The one table from the core's errors to (status code, refusal)
(naga_core/daemon/_status.py): every error class a call can meet has a
row (none falls to a catch-all), every failed call names its refusal in
the ``naga-refusal`` trailer, and the SDK hands it to the caller."""

from __future__ import annotations

import importlib
import pkgutil

import grpc
import pytest

import naga_core
from naga.constants import REFUSAL_KEY
from naga.sdk.errors import NotFound, PermissionDenied
from naga.v1.status_pb2 import Refusal
from naga_core.daemon import STATUS_OF, refusal_of, status_of
from naga_core.daemon._status import trailers_of  # pyright: ignore[reportPrivateUsage]
from naga_core.errors import NagaError
from naga_core.kernel import UnknownSetting
from tests.daemon.conftest import core_in_thread

#: Parts of the core above the daemon: their errors never reach a call.
_ABOVE = ("naga_core.cli", "naga_core.replay", "naga_core._doctor")


def _error_classes() -> list[type[NagaError]]:
    for info in pkgutil.walk_packages(naga_core.__path__, "naga_core."):
        if not info.name.startswith(_ABOVE) and not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    found: list[type[NagaError]] = []
    todo: list[type[NagaError]] = [NagaError]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if not sub.__module__.startswith(_ABOVE) and not sub.__module__.startswith("tests."):
                found.append(sub)
            todo.append(sub)
    return sorted(set(found), key=lambda c: f"{c.__module__}.{c.__qualname__}")


def test_every_error_class_has_a_row_of_its_own_or_a_parents() -> None:
    classes = _error_classes()
    assert len(classes) > 40  # the walk found the core's errors
    missing = [
        f"{c.__module__}.{c.__qualname__}"
        for c in classes
        if not any(k in STATUS_OF for k in c.__mro__ if k is not NagaError)
    ]
    assert missing == [], "give these a row in naga_core/daemon/_status.py: " + ", ".join(missing)
    assert NagaError not in STATUS_OF  # no catch-all


def test_an_error_without_a_row_is_internal_and_names_no_refusal() -> None:
    assert status_of(NagaError("x")) == (grpc.StatusCode.INTERNAL, "x")
    assert refusal_of(NagaError("x")) == Refusal.REFUSAL_UNSPECIFIED
    assert trailers_of(NagaError("x")) == ((REFUSAL_KEY, "REFUSAL_UNSPECIFIED"),)


def test_a_refusal_travels_to_the_sdk(home: str) -> None:
    assert refusal_of(UnknownSetting("a.b", "x")) == Refusal.REFUSAL_UNKNOWN_SETTING
    with core_in_thread(home) as core, core.client() as c:
        with pytest.raises(NotFound) as missing:
            c.get_setting("no.such")
        assert missing.value.refusal == Refusal.REFUSAL_UNKNOWN_SETTING
        with pytest.raises(NotFound) as nobody:
            c.abort_turn("s-never")
        assert nobody.value.refusal == Refusal.REFUSAL_SESSION_NOT_FOUND
        with pytest.raises(PermissionDenied) as raise_:
            c.set_trust("wechat:x", "known")  # raising without by_owner
        assert raise_.value.refusal == Refusal.REFUSAL_TRUST_RAISE
        c.shutdown("done")
        core.join()
