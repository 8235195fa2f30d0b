"""The owner's workspace and the capture of tools' writes (docs/design/tools.md).

Tools never write the live tree: their writes arrive staged, become one
kernel effect whose undo restores the prior bytes from the blob store, and
are applied by the effect's world action.
"""

from naga_core.workspace._changes import Captured, Staged, apply, capture
from naga_core.workspace._errors import PathRefused, Reason, WorkspaceError
from naga_core.workspace._shell import (
    CPU_LIMIT,
    MEMORY_LIMIT,
    OUTPUT_LIMIT,
    TASK_LIMIT,
    ShellOutcome,
    ShellRunner,
)
from naga_core.workspace._stage import Stage
from naga_core.workspace._tree import Kind, Node, Tree, check_path, scan, tree_hash
from naga_core.workspace._workspace import APPLY_ACTION, MAX_FILE_BYTES, Workspace, default_root

__all__ = [
    "APPLY_ACTION",
    "CPU_LIMIT",
    "MEMORY_LIMIT",
    "TASK_LIMIT",
    "MAX_FILE_BYTES",
    "OUTPUT_LIMIT",
    "Captured",
    "Kind",
    "Node",
    "PathRefused",
    "Reason",
    "ShellOutcome",
    "ShellRunner",
    "Stage",
    "Staged",
    "Tree",
    "Workspace",
    "WorkspaceError",
    "apply",
    "capture",
    "check_path",
    "default_root",
    "scan",
    "tree_hash",
]
