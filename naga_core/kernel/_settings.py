"""Typed, validated settings: the kernel's ``setting`` family.

A :class:`SettingSpec` says what a setting may hold (its kind, default and
rule); :class:`Settings` reads and writes them through a kernel (or a shadow
branch), so every change is a ledger registration that rollback undoes.
Values are checked before they are written: nothing that breaks its rule
reaches the ledger through this API, and the error
(:class:`InvalidSetting`) names the setting, the value and the rule.

Decisions:

* ``set`` with the value the entry already holds journals nothing and returns
  None: returning an older seq would tell the caller a record was written for
  them. Setting a value equal to the DEFAULT on a setting with no entry is not
  a no-op: it pins the value, so a later change of the default (a new
  release) does not move it. ``reset`` removes the entry (a registration of
  None), so the default applies again.
* Values are strict: an integer setting takes an ``int`` and not a ``bool``,
  a flag takes a ``bool``; a real setting also takes an ``int`` and stores it
  as a finite ``float``. Text (and choice) values are printable: no newlines
  or control characters. :meth:`SettingSpec.parse` turns command-line text
  into a typed value (``naga config set``).
* A stored value that breaks the current rule (written by a raw registration,
  or valid under an older release's rule) is not trusted: ``get`` gives the
  default, and ``describe`` reports the stored value and what is wrong.
* The table is fixed at construction: the shipped :data:`DEFAULT_SETTINGS`
  unless a caller (a test, a plugin host) passes its own.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from naga.constants import KERNEL_SETTING_FAMILY
from naga_core.kernel._branch import same
from naga_core.kernel._state import KernelError, Registrar, Scalar

SETTING_FAMILY = KERNEL_SETTING_FAMILY
MAX_NAME_CHARS = 64
DEFAULT_MAX_TEXT = 256
_NAME = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")
_INT64 = (-(1 << 63), (1 << 63) - 1)
_FLAG_ON = ("true", "yes", "on", "1")
_FLAG_OFF = ("false", "no", "off", "0")


class SettingError(KernelError):
    """A settings operation was refused. ``name`` is the setting."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


class UnknownSetting(SettingError):
    """No setting has this name."""


class InvalidSetting(SettingError):
    """A value breaks its setting's rule; ``value`` and ``rule`` say how."""

    def __init__(self, name: str, value: object, rule: str) -> None:
        super().__init__(name, f"setting {name} = {value!r} refused: must be {rule}")
        self.value = value
        self.rule = rule


class SettingKind(enum.Enum):
    INTEGER = "integer"
    REAL = "real"
    TEXT = "text"
    FLAG = "flag"
    CHOICE = "choice"


@dataclass(frozen=True, slots=True)
class SettingSpec:
    """One setting's kind, default and rule. Build with the named constructors."""

    name: str
    kind: SettingKind
    default: Scalar
    doc: str = ""
    minimum: int | float | None = None
    maximum: int | float | None = None
    max_len: int = DEFAULT_MAX_TEXT
    pattern: str | None = None
    options: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.name) > MAX_NAME_CHARS or not _NAME.fullmatch(self.name):
            raise ValueError(
                f"setting name {self.name!r} is not dotted lowercase words "
                f"(like 'agent.max_steps', at most {MAX_NAME_CHARS} characters)"
            )
        if (
            self.minimum is not None
            and self.maximum is not None
            and not self.minimum <= self.maximum
        ):
            raise ValueError(f"setting {self.name}: min {self.minimum} > max {self.maximum}")
        if self.max_len < 0:
            raise ValueError(f"setting {self.name}: max_len must not be negative")
        if self.pattern is not None:
            re.compile(self.pattern)  # re.error here, at definition, not at the first set
        if self.kind is SettingKind.CHOICE and (
            not self.options or len(set(self.options)) != len(self.options)
        ):
            raise ValueError(f"setting {self.name}: options must be non-empty and distinct")
        try:
            self.check(self.default)
        except InvalidSetting as exc:
            raise ValueError(f"setting {self.name}: the default breaks the rule: {exc}") from None

    # --- named constructors ----------------------------------------------------------

    @classmethod
    def integer(
        cls,
        name: str,
        default: int,
        *,
        min: int | None = None,
        max: int | None = None,
        doc: str = "",
    ) -> SettingSpec:
        return cls(name, SettingKind.INTEGER, default, doc, minimum=min, maximum=max)

    @classmethod
    def real(
        cls,
        name: str,
        default: float,
        *,
        min: float | None = None,
        max: float | None = None,
        doc: str = "",
    ) -> SettingSpec:
        return cls(name, SettingKind.REAL, float(default), doc, minimum=min, maximum=max)

    @classmethod
    def text(
        cls,
        name: str,
        default: str,
        *,
        max_len: int = DEFAULT_MAX_TEXT,
        pattern: str | None = None,
        doc: str = "",
    ) -> SettingSpec:
        return cls(name, SettingKind.TEXT, default, doc, max_len=max_len, pattern=pattern)

    @classmethod
    def flag(cls, name: str, default: bool, *, doc: str = "") -> SettingSpec:
        return cls(name, SettingKind.FLAG, default, doc)

    @classmethod
    def choice(
        cls, name: str, default: str, options: Iterable[str], *, doc: str = ""
    ) -> SettingSpec:
        return cls(name, SettingKind.CHOICE, default, doc, options=tuple(options))

    # --- rules -------------------------------------------------------------------------

    @property
    def rule(self) -> str:
        """The rule in words, as error messages and ``naga config get`` show it."""
        kind = self.kind
        if kind in (SettingKind.INTEGER, SettingKind.REAL):
            noun = "an integer" if kind is SettingKind.INTEGER else "a finite real number"
            lo, hi = self.minimum, self.maximum
            if lo is not None and hi is not None:
                return f"{noun} in {lo}..{hi}"
            if lo is not None:
                return f"{noun} >= {lo}"
            if hi is not None:
                return f"{noun} <= {hi}"
            return noun
        if kind is SettingKind.FLAG:
            return "true or false"
        if kind is SettingKind.CHOICE:
            return "one of " + ", ".join(self.options)
        text = f"printable text of at most {self.max_len} characters"
        return text if self.pattern is None else f"{text} matching {self.pattern}"

    def _refuse(self, value: object) -> InvalidSetting:
        return InvalidSetting(self.name, value, self.rule)

    def check(self, value: object) -> Scalar:
        """``value`` as stored (reals as float), or :class:`InvalidSetting`."""
        kind = self.kind
        if kind is SettingKind.FLAG:
            if isinstance(value, bool):
                return value
            raise self._refuse(value)
        if kind is SettingKind.INTEGER:
            if not isinstance(value, int) or isinstance(value, bool):
                raise self._refuse(value)
            if not _INT64[0] <= value <= _INT64[1]:
                raise self._refuse(value)
            return self._in_range(value)
        if kind is SettingKind.REAL:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise self._refuse(value)
            try:
                number = float(value)
            except OverflowError:
                raise self._refuse(value) from None
            if not math.isfinite(number):
                raise self._refuse(value)
            return self._in_range(number)
        if not isinstance(value, str) or not value.isprintable():
            raise self._refuse(value)
        if kind is SettingKind.CHOICE:
            if value not in self.options:
                raise self._refuse(value)
            return value
        if len(value) > self.max_len:
            raise self._refuse(value)
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            raise self._refuse(value)
        return value

    def _in_range(self, number: int | float) -> int | float:
        if (self.minimum is not None and number < self.minimum) or (
            self.maximum is not None and number > self.maximum
        ):
            raise self._refuse(number)
        return number

    def parse(self, text: str) -> Scalar:
        """A value from command-line text, checked."""
        kind = self.kind
        if kind is SettingKind.INTEGER:
            if not re.fullmatch(r"[+-]?[0-9]{1,19}", text):
                raise self._refuse(text)
            return self.check(int(text))
        if kind is SettingKind.REAL:
            try:
                number = float(text)
            except ValueError:
                raise self._refuse(text) from None
            return self.check(number)
        if kind is SettingKind.FLAG:
            word = text.strip().lower()
            if word in _FLAG_ON:
                return True
            if word in _FLAG_OFF:
                return False
            raise self._refuse(text)
        return self.check(text)


@dataclass(frozen=True, slots=True)
class SettingInfo:
    """One row of ``naga config get``."""

    name: str
    kind: str
    value: Scalar  # in effect
    default: Scalar
    explicit: bool  # a valid entry is registered (maybe equal to the default)
    rule: str
    doc: str
    problem: str | None = None  # a stored entry breaks the rule; the default applies


class Settings:
    """Settings over a kernel (or a shadow branch), under a fixed table."""

    def __init__(self, registrar: Registrar, specs: Iterable[SettingSpec] | None = None) -> None:
        self._reg = registrar
        table: dict[str, SettingSpec] = {}
        for spec in DEFAULT_SETTINGS if specs is None else specs:
            if spec.name in table:
                raise ValueError(f"setting {spec.name} is defined twice")
            table[spec.name] = spec
        self._specs = table

    def spec(self, name: str) -> SettingSpec:
        spec = self._specs.get(name)
        if spec is None:
            known = ", ".join(sorted(self._specs))
            raise UnknownSetting(name, f"no setting named {name!r} (known: {known})")
        return spec

    def names(self) -> list[str]:
        return sorted(self._specs)

    def _stored(self, name: str) -> Scalar | None:
        return self._reg.state.get((SETTING_FAMILY, name))

    def _effective(self, spec: SettingSpec) -> tuple[Scalar, str | None]:
        stored = self._stored(spec.name)
        if stored is None:
            return spec.default, None
        try:
            value = spec.check(stored)
        except InvalidSetting as exc:
            return spec.default, str(exc)
        if not same(value, stored):  # an int stored under a real setting
            return spec.default, f"stored {stored!r} is not a {spec.kind.value}"
        return value, None

    def get(self, name: str) -> Scalar:
        """The registered value if valid, else the default."""
        return self._effective(self.spec(name))[0]

    def _typed(self, name: str, *kinds: SettingKind) -> Scalar:
        spec = self.spec(name)
        if spec.kind not in kinds:
            wanted = " or ".join(k.value for k in kinds)
            raise SettingError(name, f"setting {name} is a {spec.kind.value}, not a {wanted}")
        return self._effective(spec)[0]

    def get_int(self, name: str) -> int:
        value = self._typed(name, SettingKind.INTEGER)
        assert isinstance(value, int)
        return value

    def get_real(self, name: str) -> float:
        value = self._typed(name, SettingKind.REAL)
        assert isinstance(value, float)
        return value

    def get_flag(self, name: str) -> bool:
        value = self._typed(name, SettingKind.FLAG)
        assert isinstance(value, bool)
        return value

    def get_text(self, name: str) -> str:
        """A text or choice setting."""
        value = self._typed(name, SettingKind.TEXT, SettingKind.CHOICE)
        assert isinstance(value, str)
        return value

    def set(self, name: str, value: Scalar, *, description: str = "") -> int | None:
        """Check and register ``value``. Returns the registration's seq, or
        None when nothing was journaled (the entry already holds ``value``, or
        this is a branch)."""
        spec = self.spec(name)
        checked = spec.check(value)
        if same(self._stored(name), checked):
            return None
        return self._reg.register(
            SETTING_FAMILY, name, checked, description=description or f"set {name} = {checked!r}"
        )

    def reset(self, name: str, *, description: str = "") -> int | None:
        """Remove the entry so the default applies; None if there was none."""
        self.spec(name)
        if self._stored(name) is None:
            return None
        return self._reg.register(
            SETTING_FAMILY, name, None, description=description or f"reset {name} to its default"
        )

    def describe(self) -> list[SettingInfo]:
        """Every setting in the table, by name."""
        rows: list[SettingInfo] = []
        for name in sorted(self._specs):
            spec = self._specs[name]
            value, problem = self._effective(spec)
            rows.append(
                SettingInfo(
                    name=name,
                    kind=spec.kind.value,
                    value=value,
                    default=spec.default,
                    explicit=self._stored(name) is not None and problem is None,
                    rule=spec.rule,
                    doc=spec.doc,
                    problem=problem,
                )
            )
        return rows


#: The settings the next issues need. A tuple of frozen specs: nothing here
#: can change at run time; the values live in the ledger.
DEFAULT_SETTINGS: tuple[SettingSpec, ...] = (
    SettingSpec.text(
        "model.provider",
        "",
        max_len=64,
        # A providers.json name (naga_core._providers), or empty.
        pattern=r"([A-Za-z0-9][A-Za-z0-9_.-]*)?",
        doc="provider for model calls from the next call on: a providers.json name, or "
        "'local' (the embedded model); unset: providers.json's default, else 'local'",
    ),
    SettingSpec.real(
        "model.timeout_s",
        120.0,
        min=1.0,
        max=3600.0,
        doc="seconds one model call may take before it is retried or fails",
    ),
    SettingSpec.integer(
        "agent.max_steps", 25, min=1, max=100, doc="most model/tool steps in one turn"
    ),
    SettingSpec.integer(
        "gateway.port",
        18789,
        min=1024,
        max=65535,
        doc="WebChat/WebSocket port on 127.0.0.1, from the gateway's next start "
        "(naga daemon start --gateway-port overrides it for that run)",
    ),
    SettingSpec.integer(
        "lanes.max_concurrent",
        4,
        min=1,
        max=64,
        doc="turns running at once across all sessions; the core applies changes live",
    ),
    SettingSpec.choice(
        "lanes.queue_mode",
        "followup",
        ("steer", "followup", "collect", "interrupt"),
        doc="what a message arriving during a run does when it names no mode; "
        "the gateway follows changes live",
    ),
    # Tools and the workspace (docs/design/tools.md).
    SettingSpec.text(
        "workspace.path",
        "",
        max_len=1024,
        pattern=r"(/[^\x00]*)?",
        doc="the owner's workspace, an absolute path; unset: $NAGA_HOME/workspace "
        "(tool plugins see the new one from their next start)",
    ),
    SettingSpec.choice(
        "tools.max_risk",
        "R2",
        ("R0", "R1", "R2", "R3", "R4"),
        doc="the riskiest shipped tool offered to an owner's turn (a peer's trust may lower it)",
    ),
    SettingSpec.choice(
        "tools.approve_from",
        "R3",
        ("R0", "R1", "R2", "R3", "R4"),
        doc="tool calls at or above this risk wait for the owner's approval",
    ),
    SettingSpec.real(
        "tools.approval_timeout_s",
        120.0,
        min=1.0,
        max=86400.0,
        doc="seconds an approval waits for the owner; no answer is a deny",
    ),
    SettingSpec.text(
        "egress.loopback_hosts",
        "",
        max_len=512,
        pattern=r"([a-z0-9.:-]+(,[a-z0-9.:-]+)*)?",
        doc="host names (comma-separated) a plugin's egress may reach on loopback: "
        "stand-ins for real hosts (tests, a local server); other loopback, private and "
        "link-local addresses are always refused",
    ),
    SettingSpec.text(
        "web.allowed_hosts",
        "*",
        max_len=1024,
        pattern=r"[a-z0-9.*-]+(,[a-z0-9.*-]+)*",
        doc="hosts web.fetch may reach on ports 80 and 443 (comma-separated; * any public "
        "host, *.example.com its subdomains); loopback, private and link-local addresses "
        "are always refused",
    ),
    SettingSpec.text(
        "wechat.api_base",
        "https://ilinkai.weixin.qq.com",
        max_len=256,
        pattern=r"https?://[A-Za-z0-9.:\[\]-]+(/[A-Za-z0-9._~/-]*)?",
        doc="the iLink API base the WeChat plugin logs in at (QR codes); its host and "
        "port are the plugin's egress",
    ),
    SettingSpec.text(
        "wechat.cdn_base",
        "https://novac2c.cdn.weixin.qq.com/c2c",
        max_len=256,
        pattern=r"https?://[A-Za-z0-9.:\[\]-]+(/[A-Za-z0-9._~/-]*)?",
        doc="the iLink media CDN base; its host and port are the WeChat plugin's egress",
    ),
    # The skill library (docs/design/skills.md).
    SettingSpec.integer(
        "skills.offer_max", 3, min=0, max=20, doc="most skills a turn's prompt names (0: none)"
    ),
    SettingSpec.integer(
        "skills.offer_tokens",
        300,
        min=0,
        max=4000,
        doc="most tokens the names and descriptions of offered skills take in a prompt",
    ),
    SettingSpec.choice(
        "skills.review",
        "on",
        ("on", "off"),
        doc="on: after a turn that succeeded and used tools, one review call (of the turn's "
        "budget) may propose a skill, judged before anything is written; a session's or "
        "peer's skill is sealed under its subject's key, so `naga memory forget` makes it "
        "unreadable (ADR 0060)",
    ),
    SettingSpec.integer(
        "skills.review_min_tools",
        2,
        min=1,
        max=100,
        doc="tool calls a turn must have made (all answered) before it is reviewed",
    ),
    SettingSpec.real(
        "skills.duplicate_threshold",
        0.6,
        min=0.1,
        max=1.0,
        doc="similarity (name, description, body) at which a new skill is a near-duplicate",
    ),
    SettingSpec.integer(
        "skills.stale_days",
        30,
        min=1,
        max=3650,
        doc="days without use after which the curator archives a skill (never deletes)",
    ),
    SettingSpec.integer(
        "skills.curate_every_h",
        0,
        min=0,
        max=8760,
        doc="hours between curations run when no turn runs (0: only `naga skill curate`)",
    ),
    # Memory (docs/design/memory.md, docs/adr/0055-idle18-idle-distillation.md).
    SettingSpec.real(
        "memory.distill_idle_h",
        0.0,
        min=0.0,
        max=8760.0,
        doc="hours after a session's last turn before its new messages are distilled into "
        "memories, one model call (0: only when archived or by `naga memory distill`)",
    ),
    # Hands-off operation (docs/adr/0022-hands-startup-snapshot.md,
    # docs/design/constitution.md).
    SettingSpec.integer(
        "ledger.snapshot_every",
        20000,
        min=100,
        max=10_000_000,
        doc="records between start-up snapshots (one is also written at every clean stop)",
    ),
    SettingSpec.integer(
        "ledger.reverify_days",
        30,
        min=0,
        max=3650,
        doc="days a sealed segment's background rehash counts: each is rehashed again after "
        "between half and all of them (spread per segment); 0: every one at every start",
    ),
    SettingSpec.real(
        "constitution.check_s",
        60.0,
        min=0.05,
        max=86400.0,
        doc="seconds between checks of the constitution file against its ledger anchor",
    ),
)


__all__ = [
    "DEFAULT_SETTINGS",
    "SETTING_FAMILY",
    "InvalidSetting",
    "SettingError",
    "SettingInfo",
    "SettingKind",
    "SettingSpec",
    "Settings",
    "UnknownSetting",
]
