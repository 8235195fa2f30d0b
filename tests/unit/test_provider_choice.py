"""The model.provider setting read against providers.json: which provider a
model call goes to, and the refusals that name the setting."""

from __future__ import annotations

import types

import pytest

from naga_core._providers import Provider, Providers
from naga_core.agent import NoModelProvider
from naga_core.agent._provider_choice import ProviderFile, choose


def _provider(name: str) -> Provider:
    return Provider(
        name=name, api="openai", base_url=f"http://{name}.test/v1", api_key="k", model="m"
    )


FILE = ProviderFile.read(
    Providers(
        "alpha",
        types.MappingProxyType({n: _provider(n) for n in ("alpha", "beta", "local")}),
    )
)
NO_LOCAL_ENTRY = ProviderFile.read(
    Providers("alpha", types.MappingProxyType({"alpha": _provider("alpha")}))
)


def test_unset_means_the_files_default_else_the_embedded_model() -> None:
    assert choose("", FILE, local_allowed=True).name == "alpha"
    embedded = choose("", ProviderFile.absent(), local_allowed=True)
    assert embedded.embedded
    assert embedded.name == "local"


def test_a_name_picks_that_provider_and_local_the_embedded_model() -> None:
    assert choose("beta", FILE, local_allowed=True).provider == _provider("beta")
    assert choose("local", NO_LOCAL_ENTRY, local_allowed=True).embedded
    assert choose("local", ProviderFile.absent(), local_allowed=True).embedded


def test_a_providers_json_entry_named_local_wins_over_the_embedded_model() -> None:
    chosen = choose("local", FILE, local_allowed=True)
    assert not chosen.embedded
    assert chosen.provider == _provider("local")


def test_an_unknown_name_is_refused_naming_the_setting_and_the_known_names() -> None:
    with pytest.raises(NoModelProvider) as err:
        choose("gamma", FILE, local_allowed=True)
    assert "model.provider = 'gamma'" in str(err.value)
    assert "known: alpha, beta, local" in str(err.value)
    with pytest.raises(NoModelProvider, match=r"providers.json lists none.*known: local"):
        choose("gamma", ProviderFile.absent(), local_allowed=True)


def test_a_refused_file_is_said_not_skipped() -> None:
    refused = ProviderFile.refused("mode 0644 is wider than 0600")
    with pytest.raises(NoModelProvider, match=r"unset.*refused: mode 0644"):
        choose("", refused, local_allowed=True)
    with pytest.raises(NoModelProvider, match=r"'alpha'.*was refused \(mode 0644"):
        choose("alpha", refused, local_allowed=True)
    assert choose("local", refused, local_allowed=True).embedded


def test_the_embedded_model_disabled_is_a_clear_refusal() -> None:
    with pytest.raises(NoModelProvider, match=r"no providers\.json"):
        choose("", ProviderFile.absent(), local_allowed=False)
    with pytest.raises(NoModelProvider, match="'local' names the embedded local model"):
        choose("local", ProviderFile.absent(), local_allowed=False)
