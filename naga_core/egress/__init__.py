"""The core's egress proxy: a plugin's only way to the network.

A plugin whose manifest asks for ``egress_proxy`` runs with no network of
its own (sandbox: a private network namespace, Unix sockets only); its
sandbox view holds one Unix socket of the core's, a CONNECT proxy that
checks each host and port against the plugin's destinations and each
resolved address against the forbidden ranges, then relays bytes (TLS end
to end). Every connection is logged; refusals are journaled. The plugin
side is ``naga_plugins.egress_transport``. Design: docs/design/egress.md.
"""

from naga_core.egress._errors import STATUS, EgressError, EgressRefused, RefusalReason
from naga_core.egress._policy import OPEN_PORTS, Destination, EgressPolicy, forbidden, normal_host
from naga_core.egress._proxies import EGRESS_DIR, NOTE_WINDOW_S, EgressProxies
from naga_core.egress._proxy import (
    MAX_CONNECTIONS,
    MAX_HEAD_BYTES,
    EgressEvent,
    EgressProxy,
    Resolver,
    parse_head,
    resolve,
)

__all__ = [
    "EGRESS_DIR",
    "MAX_CONNECTIONS",
    "MAX_HEAD_BYTES",
    "NOTE_WINDOW_S",
    "OPEN_PORTS",
    "STATUS",
    "Destination",
    "EgressError",
    "EgressEvent",
    "EgressPolicy",
    "EgressProxies",
    "EgressProxy",
    "EgressRefused",
    "RefusalReason",
    "Resolver",
    "forbidden",
    "normal_host",
    "parse_head",
    "resolve",
]
