"""The Naga kernel (SPEC section 4, "L0 kernel and ledger").

The bottom of the kernel is :mod:`naga_core.kernel._components`, a pure
lifecycle planner for declarative components: given what is registered,
enabled, known to exist (facts) and known to be broken, it says which
components should run and returns the ordered start/stop plan that gets the
runtime there. It does no I/O; the runtime that drives it journals every
activation and deactivation it performs as a ledger effect.
"""
