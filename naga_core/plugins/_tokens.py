"""The capability token each plugin worker gets, scoped to its manifest.

Role ``plugin``; the manifest's tools as the allowlist; the highest risk
among them as the risk ceiling; trust ceiling UNTRUSTED (a plugin acts for
nobody); no principal (a process token). A fresh token is minted for every
launch, and recorded in the ledger (``token.minted``) before it is handed
over. It expires (``WorkerTuning.token_ttl_s``); the worker is sent the next
one while it lives, and every token a worker held is revoked when it ends,
so a token copied out of a worker dies with it.
"""

from __future__ import annotations

import time

from naga.plugin import Manifest
from naga_core._home import Home
from naga_core.authz import Risk, Token, TokenAuthority, load_token_key
from naga_core.kernel import Kernel, TrustLevel

#: The role in every plugin token.
PLUGIN_ROLE = "plugin"


class PluginTokens:
    """Mints plugin tokens. Build with :meth:`for_home`."""

    def __init__(self, authority: TokenAuthority) -> None:
        self.authority = authority

    @classmethod
    def for_home(cls, home: Home, kernel: Kernel) -> PluginTokens:
        """Over the home's token root key (created on first use)."""
        key = load_token_key(home, create=True)
        return cls(TokenAuthority.over_kernel(kernel, key, clock=time.time_ns))

    def mint(self, manifest: Manifest, ttl_s: float) -> Token:
        """A worker's token, expiring ``ttl_s`` from now (pure: the caller
        records it in the ledger, and revokes it when the worker ends)."""
        return self.authority.mint(
            PLUGIN_ROLE,
            trust=TrustLevel.UNTRUSTED,
            risk=Risk(int(manifest.max_risk)),
            tools=[t.name for t in manifest.tools],
            ttl_ns=max(1, round(ttl_s * 1e9)),
        )


__all__ = ["PLUGIN_ROLE", "PluginTokens"]
