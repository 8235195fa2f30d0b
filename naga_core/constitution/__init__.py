"""The constitution (INV-5): rules the agent holds to, anchored in the
ledger, injected into every turn, checked at start and periodically
(docs/design/constitution.md)."""

from naga_core.constitution._constitution import (
    FAMILY,
    FILE_NAME,
    INSTALL_ACTION,
    MAX_BYTES,
    Anchor,
    Check,
    anchor,
    check,
    default_text,
    digest,
    effective,
    install,
    path_of,
    prompt_section,
    read_text,
    validate,
    write_default,
    write_file,
)
from naga_core.constitution._errors import ConstitutionError, ConstitutionRefused, Reason
from naga_core.constitution._guard import STATUS_FILE, Guard, how_to_fix
from naga_core.constitution._offline import anchored_in, last_check

__all__ = [
    "FAMILY",
    "FILE_NAME",
    "INSTALL_ACTION",
    "MAX_BYTES",
    "STATUS_FILE",
    "Anchor",
    "Check",
    "ConstitutionError",
    "ConstitutionRefused",
    "Guard",
    "Reason",
    "anchor",
    "anchored_in",
    "check",
    "default_text",
    "digest",
    "effective",
    "how_to_fix",
    "install",
    "last_check",
    "path_of",
    "prompt_section",
    "read_text",
    "validate",
    "write_default",
    "write_file",
]
