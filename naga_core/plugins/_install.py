"""Installing a plugin with the owner's consent (issue 11, item 6).

A plugin's identity is its install, not the name it claims: the folder it
is installed in (``$NAGA_HOME/plugins/<name>-<version>-<hash>``) and the
sha256 of its code as the owner approved it, registered in the kernel as
``plugin.install/<folder>`` (an effect, so ``naga rollback`` undoes an
install, an upgrade or a removal). A folder whose code hash is not
registered (copied in by hand, or changed since) is never run.

:func:`consent` is what ``naga plugin install`` shows before the owner says
yes: what the manifest asks (capabilities, egress, tools and their risk
levels) and the code's hash. The risk levels shown are the owner's
approval: a tool runs at most at its declared level.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import stat
import tarfile
from collections.abc import Mapping

from naga.constants import PLUGIN_MANIFEST_NAME
from naga.plugin import Manifest
from naga.plugin.errors import ManifestInvalid
from naga_core.plugins._errors import PluginError

#: The kernel family of installs: folder name -> approved code hash, with
#: `` local-network`` when the owner also approved egress to this machine
#: or its network (``--allow-local-network``), which manifests are refused
#: otherwise.
INSTALL_FAMILY = "plugin.install"
LOCAL_NETWORK = "local-network"
_ARCHIVES = (".tar", ".tar.gz", ".tgz")
#: Bounds of what is installed (a plugin is code, not data).
MAX_FILES = 2000
MAX_BYTES = 64 << 20
_SKIP = frozenset({"__pycache__"})


class InstallRefused(PluginError):
    """An install or removal the core will not do; the message says why."""


def code_hash(directory: str) -> str:
    """sha256 over every file of ``directory`` (relative path, whether it
    is executable, contents), in path order; ``__pycache__`` is skipped.
    A symlink or a special file is refused: what runs is what was hashed."""
    digest = hashlib.sha256(b"naga plugin code v1\x00")
    size = 0
    for files, rel in enumerate(_walk(directory), 1):
        path = os.path.join(directory, rel)
        st = os.lstat(path)
        size += st.st_size
        if files > MAX_FILES or size > MAX_BYTES:
            raise InstallRefused(
                f"{directory} holds more than {MAX_FILES} files or {MAX_BYTES >> 20} MiB"
            )
        executable = b"x" if st.st_mode & stat.S_IXUSR else b"-"
        with open(path, "rb") as f:
            body = f.read()
        digest.update(rel.encode() + b"\x00" + executable + len(body).to_bytes(8, "big") + body)
    return digest.hexdigest()


def _walk(directory: str) -> list[str]:
    found: list[str] = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP)
        for d in dirs:
            if os.path.islink(os.path.join(root, d)):
                raise InstallRefused(f"{os.path.join(root, d)} is a symlink")
        for name in names:
            path = os.path.join(root, name)
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                raise InstallRefused(f"{path} is not a regular file (a symlink or a device)")
            found.append(os.path.relpath(path, directory))
    return sorted(found)


def consent(manifest: Manifest, digest: str, source: str) -> list[str]:
    """What the owner approves, in plain words (``naga plugin install``)."""
    lines = [
        f"Plugin {manifest.name} {manifest.version} ({manifest.kind.value}) from {source}",
        f"  {manifest.description}",
        "It asks for:",
    ]
    core = "core (it may call the core's API with its own token)"
    lines.append("  capabilities: " + (core if "core" in manifest.capabilities else "none"))
    hosts = ", ".join(f"{e.host}:{e.port}" for e in manifest.egress)
    lines.append("  network: " + (hosts or "none"))
    lines.append("  tools:" + ("" if manifest.tools else " none"))
    lines += [f"    {t.name} (R{int(t.risk)}): {t.description}" for t in manifest.tools]
    lines.append(f"  code: sha256 {digest}")
    lines.append(
        "Its tools run at most at the risk levels shown (R0 reads only .. R4 destroys); "
        "installing it is a ledger entry that `naga rollback` undoes."
    )
    return lines


def unpack(source: str, staging: str) -> str:
    """Copy a plugin folder, or unpack an archive of one, into ``staging``;
    the folder that holds its manifest."""
    if not os.path.isabs(source):
        raise InstallRefused(f"{source!r} is not an absolute path")
    if os.path.isdir(source):
        _walk(source)  # refuse symlinks before copying anything
        target = os.path.join(staging, "plugin")
        shutil.copytree(source, target, ignore=shutil.ignore_patterns(*_SKIP))
        return _manifest_dir(target, source)
    if not source.endswith(_ARCHIVES) or not os.path.isfile(source):
        raise InstallRefused(
            f"{source} is neither a plugin folder nor a .tar, .tar.gz or .tgz archive"
        )
    try:
        with tarfile.open(source) as archive:
            # The "data" filter refuses absolute paths, "..", links out of
            # the tree and device files.
            archive.extractall(os.path.join(staging, "plugin"), filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise InstallRefused(f"cannot unpack {source}: {exc}") from None
    return _manifest_dir(os.path.join(staging, "plugin"), source)


def _manifest_dir(root: str, source: str) -> str:
    if os.path.isfile(os.path.join(root, PLUGIN_MANIFEST_NAME)):
        return root
    entries = [e for e in os.listdir(root) if not e.startswith(".")]
    if len(entries) == 1 and os.path.isfile(os.path.join(root, entries[0], PLUGIN_MANIFEST_NAME)):
        return os.path.join(root, entries[0])
    raise InstallRefused(f"{source} has no {PLUGIN_MANIFEST_NAME} (at its top or in one folder)")


def read_manifest(directory: str, source: str, *, local_network: bool = False) -> Manifest:
    try:
        return Manifest.load(
            os.path.join(directory, PLUGIN_MANIFEST_NAME), local_egress=local_network
        )
    except ManifestInvalid as exc:
        raise InstallRefused(f"{source}: {exc}") from None


def place(
    plugins_root: str,
    source: str,
    approved: str,
    reserved: frozenset[str] = frozenset(),
    *,
    local_network: bool = False,
) -> tuple[Manifest, str, str]:
    """Copy the approved code into ``plugins_root``: its manifest, folder
    name and hash. Refused when the code is not what the owner approved, or
    its name is ``reserved`` (a shipped plugin's)."""
    os.makedirs(plugins_root, mode=0o700, exist_ok=True)
    staging = os.path.join(plugins_root, f".staging-{secrets.token_hex(6)}")
    os.mkdir(staging, 0o700)
    try:
        found = unpack(source, staging)
        manifest = read_manifest(found, source, local_network=local_network)
        if manifest.name in reserved:
            raise InstallRefused(
                f"{manifest.name!r} is the name of a plugin shipped with Naga; another plugin "
                "may not take it: rename it (its manifest's name) to install it"
            )
        digest = code_hash(found)
        if digest != approved:
            raise InstallRefused(
                f"the code at {source} is not the code approved (sha256 {digest}, approved "
                f"{approved or 'none'}): run `naga plugin install` again and look again"
            )
        folder = f"{manifest.name}-{manifest.version}-{digest[:12]}"
        final = os.path.join(plugins_root, folder)
        if os.path.isdir(final):
            if code_hash(final) != digest:  # changed by hand: put the approved code back
                shutil.rmtree(final)
                os.rename(found, final)
        else:
            os.rename(found, final)
        return manifest, folder, digest
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def registration(digest: str, local_network: bool) -> str:
    """The value of an install registration."""
    return f"{digest} {LOCAL_NETWORK}" if local_network else digest


def approved_in(directory: str, installs: Mapping[str, object]) -> str | None:
    """How a folder of the home's plugins is installed as it is now: None
    (not, or its code changed since), ``""``, or :data:`LOCAL_NETWORK`."""
    want = installs.get(os.path.basename(directory))
    if not isinstance(want, str):
        return None
    digest, _, extra = want.partition(" ")
    try:
        same = code_hash(directory) == digest
    except (InstallRefused, OSError):
        return None
    return extra if same else None


__all__ = [
    "INSTALL_FAMILY",
    "LOCAL_NETWORK",
    "registration",
    "InstallRefused",
    "approved_in",
    "code_hash",
    "consent",
    "place",
    "read_manifest",
    "unpack",
]
