"""The AgentSkills ``SKILL.md`` convention: a folder with ``SKILL.md`` (YAML
frontmatter with at least ``name`` and ``description``, then a Markdown
body) and optional ``scripts/``, ``references/`` and ``assets/``.

Bytes are kept exactly as given: the store never re-serialises a file, so
an import followed by an export is the identity on the bytes. YAML is read
with ``yaml.safe_load`` only (no tags, no objects).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from naga_core.skills._errors import Reason, SkillRefused

SKILL_FILE = "SKILL.md"
#: The folders a skill may carry besides SKILL.md.
FOLDERS = ("scripts", "references", "assets")
NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_FILES = 64
MAX_SKILL_MD_BYTES = 256 << 10
MAX_TOTAL_BYTES = 4 << 20
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")


@dataclass(frozen=True, slots=True)
class SkillDoc:
    """What SKILL.md says: its frontmatter's name and description, the
    rest of the frontmatter, and the body."""

    name: str
    description: str
    body: str
    meta: Mapping[str, object]


def check_name(name: str) -> str:
    if len(name) > MAX_NAME_CHARS or NAME.fullmatch(name) is None:
        raise SkillRefused(
            Reason.BAD_FORMAT,
            f"skill name {name[:80]!r} must be lowercase letters, digits and single hyphens, "
            f"at most {MAX_NAME_CHARS} characters",
        )
    return name


def check_path(path: str) -> str:
    """A file path of a skill: SKILL.md, or under one of FOLDERS."""
    if path == SKILL_FILE:
        return path
    parts = path.split("/")
    if len(parts) < 2 or parts[0] not in FOLDERS:
        raise SkillRefused(
            Reason.BAD_PATH,
            f"{path[:200]!r}: a skill holds SKILL.md and files under {', '.join(FOLDERS)}",
        )
    for part in parts[1:]:
        if _PART.fullmatch(part) is None or part in (".", ".."):
            raise SkillRefused(Reason.BAD_PATH, f"{path[:200]!r}: {part[:80]!r} is not a safe name")
    return path


def parse(raw: bytes) -> SkillDoc:
    """Read SKILL.md's bytes; a clear refusal for anything else."""
    if len(raw) > MAX_SKILL_MD_BYTES:
        raise SkillRefused(
            Reason.TOO_LARGE, f"SKILL.md is {len(raw)} bytes, the limit is {MAX_SKILL_MD_BYTES}"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkillRefused(Reason.BAD_FORMAT, f"SKILL.md is not UTF-8: {exc}") from None
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip("\r\n") != "---":
        raise SkillRefused(Reason.BAD_FORMAT, "SKILL.md must start with a '---' frontmatter line")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip("\r\n") == "---"), None)
    if end is None:
        raise SkillRefused(Reason.BAD_FORMAT, "SKILL.md's frontmatter has no closing '---' line")
    import yaml  # noqa: PLC0415 - a core start reads no SKILL.md: kept out of it (issue 13)

    try:
        loaded: object = yaml.safe_load("".join(lines[1:end]))
    except yaml.YAMLError as exc:
        raise SkillRefused(
            Reason.BAD_FORMAT, f"SKILL.md's frontmatter is not YAML: {exc}"
        ) from None
    if not isinstance(loaded, dict):
        raise SkillRefused(Reason.BAD_FORMAT, "SKILL.md's frontmatter must be a YAML mapping")
    meta = cast("dict[object, object]", loaded)
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str):
        raise SkillRefused(Reason.BAD_FORMAT, "SKILL.md's frontmatter needs a name (text)")
    if not isinstance(description, str) or not description.strip():
        raise SkillRefused(Reason.BAD_FORMAT, "SKILL.md's frontmatter needs a description (text)")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise SkillRefused(
            Reason.BAD_FORMAT,
            f"the description is {len(description)} characters, at most {MAX_DESCRIPTION_CHARS}",
        )
    return SkillDoc(
        check_name(name),
        description.strip(),
        "".join(lines[end + 1 :]),
        {str(k): v for k, v in meta.items()},
    )


def check_files(files: Mapping[str, bytes]) -> SkillDoc:
    """A whole skill's files are well formed; what its SKILL.md says."""
    if SKILL_FILE not in files:
        raise SkillRefused(Reason.BAD_FORMAT, "a skill needs a SKILL.md")
    if len(files) > MAX_FILES:
        raise SkillRefused(Reason.TOO_LARGE, f"{len(files)} files, at most {MAX_FILES}")
    total = 0
    for path, data in files.items():
        check_path(path)
        total += len(data)
    if total > MAX_TOTAL_BYTES:
        raise SkillRefused(Reason.TOO_LARGE, f"{total} bytes in all, at most {MAX_TOTAL_BYTES}")
    return parse(files[SKILL_FILE])


def render(name: str, description: str, body: str) -> bytes:
    """A SKILL.md for a skill the agent writes (the frontmatter dumped by
    the same YAML library, so it reads back as written)."""
    import yaml  # noqa: PLC0415 - as in parse()

    front = yaml.safe_dump(
        {"name": name, "description": description}, sort_keys=False, allow_unicode=True
    )
    return f"---\n{front}---\n{body if body.endswith(chr(10)) else body + chr(10)}".encode()


def read_dir(path: str) -> tuple[dict[str, bytes], frozenset[str]]:
    """A skill folder's files and which are executable (symlinks and other
    special files are refused: a skill is plain files)."""
    if not os.path.isfile(os.path.join(path, SKILL_FILE)):
        raise SkillRefused(Reason.BAD_FORMAT, f"{path} holds no {SKILL_FILE}")
    files: dict[str, bytes] = {}
    executable: set[str] = set()
    for root, dirs, names in os.walk(path):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(root, name)
            rel = os.path.relpath(full, path).replace(os.sep, "/")
            st = os.lstat(full)
            if not stat.S_ISREG(st.st_mode):
                raise SkillRefused(Reason.BAD_PATH, f"{rel} is not a plain file")
            check_path(rel)
            with open(full, "rb") as f:
                files[rel] = f.read()
            if st.st_mode & 0o111:
                executable.add(rel)
        for d in dirs:
            if os.path.islink(os.path.join(root, d)):
                raise SkillRefused(Reason.BAD_PATH, f"{d} is a symlink")
    check_files(files)
    return files, frozenset(executable)


def write_dir(path: str, files: Mapping[str, bytes], executable: frozenset[str]) -> None:
    """Write a skill's files under ``path`` (made if missing; files there of
    the same name are replaced)."""
    for rel in sorted(files):
        check_path(rel)
        full = os.path.join(path, *rel.split("/"))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(files[rel])
        os.chmod(full, 0o755 if rel in executable else 0o644)


__all__ = [
    "FOLDERS",
    "MAX_FILES",
    "SKILL_FILE",
    "SkillDoc",
    "check_files",
    "check_name",
    "check_path",
    "parse",
    "read_dir",
    "render",
    "write_dir",
]
