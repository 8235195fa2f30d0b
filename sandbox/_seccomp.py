"""Compile a :class:`naga.v1.sandbox_pb2.SeccompSpec` with libseccomp and load it.

Runs in the child, last of all layers, after the target module was imported:
from here on no new code can be mapped executable, so every import the
target needs has already happened.
"""

from __future__ import annotations

import pyseccomp as seccomp  # pyright: ignore[reportMissingTypeStubs]

from naga.v1 import sandbox_pb2

# libseccomp's __NR_SCMP_ERROR: a name it does not know on any architecture.
_UNKNOWN_SYSCALL = -1

_OPS = {
    sandbox_pb2.SECCOMP_COMPARE_EQ: seccomp.EQ,
    sandbox_pb2.SECCOMP_COMPARE_NE: seccomp.NE,
    sandbox_pb2.SECCOMP_COMPARE_MASKED_EQ: seccomp.MASKED_EQ,
}


def _action(rule: sandbox_pb2.SeccompRule) -> int:
    if rule.action == sandbox_pb2.SECCOMP_ACTION_ALLOW:
        return seccomp.ALLOW
    if rule.action == sandbox_pb2.SECCOMP_ACTION_ERRNO:
        return seccomp.ERRNO(rule.errno)
    if rule.action == sandbox_pb2.SECCOMP_ACTION_KILL_PROCESS:
        return seccomp.KILL_PROCESS
    raise ValueError(f"seccomp rule for {rule.syscall}: unknown action {rule.action}")


def _arg(check: sandbox_pb2.SeccompArg, own_pid: int) -> seccomp.Arg:
    op = _OPS.get(check.op)
    if op is None:
        raise ValueError(f"unknown seccomp comparison {check.op}")
    value = own_pid if check.own_pid else check.value
    if op == seccomp.MASKED_EQ:
        return seccomp.Arg(check.index, op, check.mask, value)
    return seccomp.Arg(check.index, op, value)


def build(spec: sandbox_pb2.SeccompSpec, own_pid: int) -> seccomp.SyscallFilter:
    """The filter for ``spec``; ``own_pid`` fills the rules on our own pid."""
    default = seccomp.ERRNO(spec.default_errno)
    flt = seccomp.SyscallFilter(defaction=default)
    # Another architecture's syscall numbers (i386 int 0x80, x32) would
    # bypass every rule here: such a call kills the process, as in OpenSSH.
    flt.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.KILL_PROCESS)
    if spec.tsync:
        flt.set_attr(seccomp.Attr.CTL_TSYNC, 1)
    for rule in spec.rules:
        action = _action(rule)
        if action == default:
            continue  # documented refusals that the default already gives
        number = seccomp.resolve_syscall(seccomp.Arch.NATIVE, rule.syscall)
        if number == _UNKNOWN_SYSCALL:
            raise ValueError(f"libseccomp does not know the syscall {rule.syscall!r}")
        try:
            flt.add_rule(action, number, *(_arg(a, own_pid) for a in rule.args))
        except OSError as e:
            raise OSError(e.errno, f"seccomp rule for {rule.syscall}: {e.strerror}") from e
    return flt


def load(spec: sandbox_pb2.SeccompSpec, own_pid: int) -> None:
    build(spec, own_pid).load()
