"""Before a turn runs: whether its idempotency key names one already known
(joined while it runs, replayed from the ledger once ended), a session's
detail read back from the ledger when it was dropped from memory, and the
trust the turn runs at."""

from __future__ import annotations

import trio

from naga.trust import TrustLevel
from naga.v1 import core_pb2 as cpb
from naga.v1 import turn_pb2 as tpb
from naga_core.agent import _sessions as rec
from naga_core.agent._core import Caller
from naga_core.agent._errors import SessionNotFound
from naga_core.agent._turn import Running, TurnCursor
from naga_core.kernel import Kernel, TrustTable
from naga_core.ledger import Ledger

_FROM_PB_TRUST = {
    cpb.TRUST_LEVEL_UNTRUSTED: TrustLevel.UNTRUSTED,
    cpb.TRUST_LEVEL_GUEST: TrustLevel.GUEST,
    cpb.TRUST_LEVEL_KNOWN: TrustLevel.KNOWN,
    cpb.TRUST_LEVEL_OWNER: TrustLevel.OWNER,
}


def known_turn(
    sessions: rec.Sessions,
    running: dict[str, Running],
    ledger: Ledger,
    req: tpb.RunTurnRequest,
) -> TurnCursor | None:
    """The stream of the turn ``req``'s key already named in its session
    (loaded): joined if it still runs, else replayed from its records; None
    if the key is new (or out of the session's window)."""
    session = sessions.get(req.session)
    if session is None or req.idempotency_key not in session.keys:
        return None
    ended = session.keys[req.idempotency_key]
    joined = running.get(ended.turn_id)
    if joined is not None:
        return TurnCursor(joined)
    end = ledger.read(ended.end_seq) if ended.end_seq else None
    return TurnCursor(None, rec.replay(ended, end, sessions.opener))


async def read_back(sessions: rec.Sessions, ledger: Ledger, name: str) -> rec.Session:
    """The session ``name`` with its history and keys in memory (read back
    from the ledger, on a worker thread, if they were dropped)."""
    packed = sessions.unloaded(name)
    if packed is not None:
        detail = await trio.to_thread.run_sync(sessions.read_detail, ledger, name, packed)
        return sessions.load(name, detail)
    found = sessions.get(name)
    if found is None:
        raise SessionNotFound(f"no session {name!r}")
    return found


async def with_previews(
    sessions: rec.Sessions, ledger: Ledger, shown: list[rec.Session]
) -> list[rec.Session]:
    """``shown``, each with its preview (those not known read back from the
    ledger on a worker thread, once: they are kept)."""
    mark, wanted = sessions.unknown_previews(shown)
    if wanted:
        found = await trio.to_thread.run_sync(sessions.read_previews, ledger, wanted)
        sessions.take_previews(mark, found)
    return shown


def turn_trust(
    kernel: Kernel,
    caller: Caller,
    peer: str,
    claimed: cpb.TrustLevel.ValueType = cpb.TRUST_LEVEL_UNSPECIFIED,
) -> TrustLevel:
    """The turn's trust: the owner's CLI is the owner; otherwise the
    gateway's derivation (``claimed``, e.g. loopback WebChat = owner) or
    else the trust table's level for the peer, never above the caller's
    token (INV-3: trust only falls)."""
    if caller.owner and not peer:
        return TrustLevel.OWNER
    level = TrustTable(kernel).level(peer) if peer else TrustLevel.UNTRUSTED
    if claimed:
        level = _FROM_PB_TRUST.get(claimed, TrustLevel.UNTRUSTED)
    if caller.owner:
        return level
    grant = caller.grant
    return min(level, grant.trust) if grant is not None else TrustLevel.UNTRUSTED


__all__ = ["known_turn", "read_back", "turn_trust"]
