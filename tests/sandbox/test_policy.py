"""The seccomp policies: they compile, and they keep the promises the design makes."""

from __future__ import annotations

import errno
import socket

import pytest

import sandbox
from sandbox import _seccomp, _syscalls
from sandbox._policy import Action, ArgCheck, Compare, Rule, SeccompPolicy
from sandbox._wire import seccomp_to_proto

POLICIES: dict[str, SeccompPolicy] = {
    "gateway": _syscalls.gateway_policy(),
    "executor": _syscalls.executor_policy(),
    "plugin": _syscalls.plugin_policy(egress=False),
    "plugin+egress": _syscalls.plugin_policy(egress=True),
}

#: Never allowed, under any arguments, in any profile.
NEVER_ALLOWED = frozenset(
    [
        "execve",
        "execveat",
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "fork",
        "vfork",
        "clone3",
        "unshare",
        "setns",
        "mount",
        "bpf",
        "io_uring_setup",
        "userfaultfd",
        "keyctl",
        "memfd_create",
        "personality",
        "perf_event_open",
        "setrlimit",
        "chmod",
        "fchmodat",
        "chown",
        "setuid",
        "init_module",
        "kexec_load",
    ]
)
#: Allowed only under argument conditions.
ONLY_CONDITIONAL = frozenset(
    [
        "mmap",
        "mprotect",
        "clone",
        "kill",
        "tgkill",
        "prctl",
        "prlimit64",
        "fcntl",
        "ioctl",
        "socket",
        "socketpair",
    ]
)
#: Killed rather than refused.
KILLED = frozenset(
    ["execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev", "mount"]
)


@pytest.mark.parametrize("name", POLICIES)
def test_policy_compiles_with_libseccomp(name: str) -> None:
    # Unknown syscall names and conflicting rules fail here, not in a child.
    flt = _seccomp.build(seccomp_to_proto(POLICIES[name], tsync=True), own_pid=12345)
    assert flt is not None


@pytest.mark.parametrize("name", POLICIES)
def test_policy_promises(name: str) -> None:
    policy = POLICIES[name]
    assert policy.default_errno == errno.EPERM
    allowed = policy.syscalls(Action.ALLOW)
    assert not allowed & NEVER_ALLOWED
    for syscall in ONLY_CONDITIONAL:
        assert syscall in allowed, syscall
        assert policy.unconditional(syscall) is None, syscall
    assert policy.syscalls(Action.KILL_PROCESS) >= KILLED
    (clone3,) = policy.rules_for("clone3")
    assert (clone3.action, clone3.errno) == (Action.ERRNO, errno.ENOSYS)
    for rule in policy.rules_for("mmap") + policy.rules_for("mprotect"):
        assert rule.args == (ArgCheck(2, Compare.MASKED_EQ, 0, 4),)  # PROT_EXEC clear


def _socket_families(policy: SeccompPolicy) -> set[int]:
    return {
        check.value
        for rule in policy.rules_for("socket")
        if rule.action is Action.ALLOW
        for check in rule.args
        if check.index == 0
    }


def test_only_networked_kinds_get_inet_sockets() -> None:
    assert _socket_families(POLICIES["executor"]) == {socket.AF_UNIX}
    assert _socket_families(POLICIES["plugin"]) == {socket.AF_UNIX}
    inet = {socket.AF_UNIX, socket.AF_INET, socket.AF_INET6}
    assert _socket_families(POLICIES["plugin+egress"]) == inet
    # The gateway serves the socket the core bound: it makes only Unix ones,
    # and may neither bind nor listen (no ephemeral port by a bare listen()).
    assert _socket_families(POLICIES["gateway"]) == {socket.AF_UNIX}
    gateway = POLICIES["gateway"].syscalls(Action.ALLOW)
    assert {"accept", "accept4"} <= gateway
    assert not {"bind", "listen"} & gateway
    for name in ("executor", "plugin", "plugin+egress"):
        assert not {"bind", "listen", "accept", "accept4"} & POLICIES[name].syscalls(Action.ALLOW)


def test_profiles_carry_their_policy(tmp_path: object) -> None:
    assert sandbox.Profile.gateway("/run/s").seccomp == POLICIES["gateway"]
    assert sandbox.Profile.executor("/run/s").seccomp == POLICIES["executor"]


def test_no_syscall_is_both_allowed_and_refused_unconditionally() -> None:
    for policy in POLICIES.values():
        for syscall in policy.syscalls(Action.ALLOW):
            actions = {r.action for r in policy.rules_for(syscall) if not r.args}
            assert len(actions) <= 1, syscall


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ArgCheck(6, Compare.EQ, 0), "index must be 0..5"),
        (lambda: ArgCheck(0, Compare.EQ, -1), "unsigned 64-bit"),
        (lambda: ArgCheck(0, Compare.EQ, 1 << 64), "unsigned 64-bit"),
        (lambda: Rule("read", Action.ALLOW, "why", errno=1), "errno goes with the ERRNO"),
        (lambda: Rule("read", Action.ERRNO, "why"), "errno goes with the ERRNO"),
        (lambda: Rule("read", Action.ALLOW, ""), "every rule says why"),
        (lambda: Rule("rm -rf", Action.ALLOW, "why"), "not a syscall name"),
    ],
)
def test_malformed_rules_are_refused(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


def test_unknown_syscall_name_fails_to_compile() -> None:
    policy = SeccompPolicy((Rule("no_such_syscall", Action.ALLOW, "typo"),))
    with pytest.raises(ValueError, match="does not know the syscall 'no_such_syscall'"):
        _seccomp.build(seccomp_to_proto(policy, tsync=True), own_pid=1)
