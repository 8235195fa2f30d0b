"""The skill library (SPEC section 4, L2; docs/design/skills.md).

Skills are AgentSkills ``SKILL.md`` folders kept as a content-addressed
version tree in the core's blob store; refs per scope (``session/<id>``,
``peer/<id>``, ``global``) are kernel state, so every change is an effect
and a rollback moves refs back while every version stays addressable.
"""

from naga_core.skills._curate import CurateAction
from naga_core.skills._curate import apply as apply_curation
from naga_core.skills._curate import plan as plan_curation
from naga_core.skills._errors import Reason, SkillError, SkillNotFound, SkillRefused
from naga_core.skills._files import clear as clear_files
from naga_core.skills._format import (
    FOLDERS,
    SKILL_FILE,
    SkillDoc,
    check_files,
    check_name,
    parse,
    read_dir,
    render,
    write_dir,
)
from naga_core.skills._library import (
    MIN_SCORE,
    TURN_KIND,
    VIEW_SPEC,
    VIEW_TOOL,
    Library,
    Offer,
    Offered,
    Usage,
    Viewed,
)
from naga_core.skills._lint import (
    POISON_KINDS,
    Finding,
    Near,
    lint_import,
    near_duplicate,
    poison,
    similarity,
)
from naga_core.skills._objects import AUTHORS, Commit, Tree, TreeEntry, digest_of
from naga_core.skills._schedule import curate_when_idle
from naga_core.skills._sediment import (
    REVIEW_PROMPT,
    REVIEW_SCHEMA,
    REVIEW_TOOL,
    Outcome,
    Proposal,
    judge_and_write,
    scopes_for,
    supported,
)
from naga_core.skills._store import (
    ARCHIVED_FAMILY,
    GLOBAL,
    PINNED_FAMILY,
    REF_FAMILY,
    SkillRef,
    SkillStore,
    Version,
    check_scope,
    peer_scope,
    session_scope,
)
from naga_core.skills._text import Bm25, cosine, weighted, words

__all__ = [
    "ARCHIVED_FAMILY",
    "AUTHORS",
    "FOLDERS",
    "GLOBAL",
    "MIN_SCORE",
    "PINNED_FAMILY",
    "REF_FAMILY",
    "REVIEW_PROMPT",
    "REVIEW_SCHEMA",
    "REVIEW_TOOL",
    "SKILL_FILE",
    "TURN_KIND",
    "VIEW_SPEC",
    "VIEW_TOOL",
    "Bm25",
    "Commit",
    "CurateAction",
    "Finding",
    "Library",
    "Near",
    "Offer",
    "Offered",
    "Outcome",
    "Proposal",
    "Reason",
    "SkillDoc",
    "SkillError",
    "SkillNotFound",
    "SkillRef",
    "SkillRefused",
    "SkillStore",
    "Tree",
    "TreeEntry",
    "Usage",
    "Viewed",
    "Version",
    "apply_curation",
    "check_files",
    "clear_files",
    "check_name",
    "check_scope",
    "curate_when_idle",
    "cosine",
    "digest_of",
    "judge_and_write",
    "near_duplicate",
    "parse",
    "peer_scope",
    "plan_curation",
    "poison",
    "lint_import",
    "POISON_KINDS",
    "read_dir",
    "render",
    "scopes_for",
    "session_scope",
    "similarity",
    "supported",
    "weighted",
    "words",
    "write_dir",
]
