"""Which model provider a turn uses: the ``model.provider`` setting read
against providers.json (docs/design/models.md, "Choosing the provider").

* The setting names a provider of providers.json, or ``local`` (the
  embedded model). A providers.json entry named ``local`` wins over the
  embedded model: the file is the owner's explicit word.
* Unset (``""``, the default): providers.json's ``default`` when the file
  exists, else the embedded model.
* Anything else is :class:`NoModelProvider` naming the setting and the
  names it could hold: never a silent fallback to another provider.

The choice is made per model call from the setting's current value and the
file as it is now (:mod:`naga_core.agent._provider_reload`), so a change of
either (or a rollback of the setting) takes effect at the next call.
"""

from __future__ import annotations

from dataclasses import dataclass

from naga_core._providers import Provider, Providers
from naga_core.agent._errors import NoModelProvider

#: The setting, and its value for the embedded local model.
SETTING = "model.provider"
LOCAL = "local"


@dataclass(frozen=True, slots=True)
class ProviderFile:
    """providers.json as the core last read it: parsed, absent, or refused."""

    providers: Providers | None
    #: Why the file was refused ("" when it was read or is absent).
    problem: str = ""

    @classmethod
    def read(cls, providers: Providers) -> ProviderFile:
        return cls(providers)

    @classmethod
    def absent(cls) -> ProviderFile:
        return cls(None)

    @classmethod
    def refused(cls, problem: str) -> ProviderFile:
        return cls(None, problem)

    def names(self) -> list[str]:
        """What the setting may name, sorted."""
        listed = set(self.providers.by_name) if self.providers is not None else set[str]()
        return sorted(listed | {LOCAL})


@dataclass(frozen=True, slots=True)
class Choice:
    """A configured provider, or (``provider`` None) the embedded model."""

    provider: Provider | None

    @property
    def name(self) -> str:
        return LOCAL if self.provider is None else self.provider.name

    @property
    def embedded(self) -> bool:
        return self.provider is None


def choose(setting: str, file: ProviderFile, *, local_allowed: bool) -> Choice:
    """The provider for the next model call, or :class:`NoModelProvider`."""
    providers = file.providers
    if setting == "":
        if providers is not None:
            return Choice(providers.default_provider)
        if file.problem:
            raise NoModelProvider(
                f"{SETTING} is unset, so providers.json's default would be used, but the "
                f"file was refused: {file.problem}"
            )
        return _embedded(setting, local_allowed)
    if providers is not None and setting in providers.by_name:
        return Choice(providers.by_name[setting])
    if setting == LOCAL:
        return _embedded(setting, local_allowed)
    where = (
        f"providers.json was refused ({file.problem})"
        if file.problem
        else "providers.json lists none"
        if providers is None
        else "it is not in providers.json"
    )
    raise NoModelProvider(
        f"setting {SETTING} = {setting!r} names no known provider ({where}); "
        f"known: {', '.join(file.names())}. Fix it with `naga config set {SETTING} NAME` "
        f"or `naga config reset {SETTING}`"
    )


def _embedded(setting: str, local_allowed: bool) -> Choice:
    if local_allowed:
        return Choice(None)
    if setting:
        raise NoModelProvider(
            f"setting {SETTING} = {setting!r} names the embedded local model, but this core "
            "runs without it; name a provider of providers.json"
        )
    raise NoModelProvider(
        "no model provider is configured: there is no providers.json and this core runs "
        "without the embedded local model; write $NAGA_HOME/credentials/providers.json "
        "(docs/design/models.md)"
    )


__all__ = ["LOCAL", "SETTING", "Choice", "ProviderFile", "choose"]
