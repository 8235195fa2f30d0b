"""Capability token benchmark: prints one JSON object.

Measured on the CPU alone (revocations, spending and trust from dicts, so
no ledger I/O), best of ``--repeat`` runs of ``--count`` operations each:

* verifications/s of a token with 0, 4 and 16 caveats (the whole check:
  parse, canonical form, HMAC chain, caveats against a request, revocation
  of the token and its ancestors, budget), and the token's size;
* the same for the HMAC chain alone (what an unauthenticated caller can
  make the core do), and for a sub-task's token 4 levels down;
* attenuations/s (a holder appending one caveat, no key), mints/s (a root
  token with the usual caveats) and spawns/s (a sub-task's token);
* for ADR 0003: Ed25519 signature verifications/s of a same-size token
  (the public-key alternative), with the ``cryptography`` package.

    python bench/token_verify.py --count 20000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from naga_core.authz import (
    Grant,
    Risk,
    RiskCeiling,
    RootKey,
    Token,
    TokenAuthority,
    ToolsAllowed,
)
from naga_core.authz._token import mint_token, verify_chain
from naga_core.kernel import TrustLevel

PEER = "wechat:bench"


def _rate(count: int, repeat: int, op: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(count):
            op()
        best = min(best, time.perf_counter() - start)
    return round(count / best, 1)


def _progress(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description="Capability token benchmark (one JSON object)")
    ap.add_argument("--count", type=int, default=20000, help="operations per measurement")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (best is kept)")
    args = ap.parse_args()
    count, repeat = args.count, args.repeat
    if count < 1 or repeat < 1:
        ap.error("--count and --repeat must be positive")

    key = RootKey.generate()
    clock = time.time_ns
    spent: dict[bytes, int] = {}
    authority = TokenAuthority.create(
        key,
        clock=clock,
        is_revoked=lambda _tid: False,
        spent=lambda tid: spent.get(tid, 0),
        trust_of=lambda _peer: TrustLevel.KNOWN,
    )
    request = authority.request("executor", session="s-1", tool="fs.read", risk=Risk.R1, budget=1)

    # 0 caveats: a bare chain (only the core could make one); 4: what mint
    # writes for a budgeted token; 16: that, narrowed 12 times by holders.
    bare = mint_token(key, token_id=bytes(16), principal=PEER, lineage=(), caveats=())
    four = authority.mint(
        "executor", trust=TrustLevel.KNOWN, risk=Risk.R2, principal=PEER, budget=10**9
    )
    sixteen = four.attenuate(
        *[RiskCeiling(Risk.R2)] * 6, *[ToolsAllowed.of(["fs.read", "web.search"])] * 6
    )
    tokens: dict[str, Token] = {"0": bare, "4": four, "16": sixteen}
    assert [len(t.caveats) for t in tokens.values()] == [0, 4, 16]

    verify: dict[str, float] = {}
    chain_only: dict[str, float] = {}
    sizes: dict[str, int] = {}
    for n, token in tokens.items():
        raw = token.to_bytes()
        sizes[n] = len(raw)
        authority.verify(raw, request)
        _progress(f"verifying a token with {n} caveats")
        verify[n] = _rate(count, repeat, lambda raw=raw: authority.verify(raw, request))
        chain_only[n] = _rate(count, repeat, lambda raw=raw: verify_chain(key, raw))

    grant: Grant = authority.verify(four.to_bytes(), request)
    for depth in range(4):
        grant = authority.verify(
            authority.spawn(grant, budget=10**9 - 1 - depth).to_bytes(), request
        )
    deep = authority.spawn(grant, budget=1000).to_bytes()
    _progress("verifying a sub-task's token 4 levels down")
    deep_rate = _rate(count, repeat, lambda: authority.verify(deep, request))

    _progress("attenuating, minting, spawning")
    narrower = RiskCeiling(Risk.R1)
    attenuate_rate = _rate(count, repeat, lambda: four.attenuate(narrower))
    mint_rate = _rate(
        count,
        repeat,
        lambda: authority.mint(
            "executor",
            trust=TrustLevel.KNOWN,
            risk=Risk.R2,
            session="s-1",
            principal=PEER,
            tools=["fs.read", "web.search"],
            budget=1000,
            ttl_ns=3600 * 10**9,
        ),
    )
    parent = authority.verify(four.to_bytes(), request)
    spawn_rate = _rate(
        count, repeat, lambda: authority.spawn(parent, budget=100, tools=["fs.read"])
    )

    _progress("Ed25519 verification of a same-size message (ADR 0003's alternative)")
    signer = Ed25519PrivateKey.generate()
    public = signer.public_key()
    message = four.to_bytes()
    signature = signer.sign(message)
    ed_rate = _rate(count, repeat, lambda: public.verify(signature, message))
    ed_sign_rate = _rate(count, repeat, lambda: signer.sign(message))

    print(
        json.dumps(
            {
                "benchmark": "token_verify",
                "count": count,
                "repeat": repeat,
                "token_bytes": sizes,
                "verify_per_s": verify,
                "hmac_chain_only_per_s": chain_only,
                "verify_depth4_subtask_per_s": deep_rate,
                "subtask_depth4_token_bytes": len(deep),
                "attenuate_per_s": attenuate_rate,
                "mint_per_s": mint_rate,
                "spawn_per_s": spawn_rate,
                "ed25519_verify_per_s": ed_rate,
                "ed25519_sign_per_s": ed_sign_rate,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
