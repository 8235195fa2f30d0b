"""``naga job add | list | show ID | pause ID | resume ID | remove ID | run ID``:
the owner's scheduled jobs (docs/design/scheduler.md).

``add "SENTENCE"`` asks the core to compile the sentence with one model
call, shows the schedule it gave (cron, zone, prompt, next fires) and asks
for a yes (``--yes`` skips; off a terminal without ``--yes`` it refuses, as
``naga rollback`` does); ``add --cron EXPR --prompt TEXT [--tz ZONE]``
makes one as written. ``--deliver-to PEER`` sends each run's reply to a
WeChat peer (``wechat:BOT/USER``, ``wechat:BOT`` for that binding's owner,
``wechat`` for the owner of the only binding); the core refuses a peer
that is not bound, naming those that are. Each job is a kernel entry, so ``naga rollback``
takes a new one away or brings a removed one back. Exit status: 0 done;
1 cancelled or refused.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from naga.sdk import Client
from naga.v1 import job_pb2 as jpb
from naga_core._home import Home
from naga_core.cli._output import Outcome
from naga_core.errors import CommandRefused

#: One model call; the local model on a small machine takes its time.
COMPILE_TIMEOUT_S = 180.0
_MISFIRE = {jpb.MISFIRE_POLICY_ONCE: "once", jpb.MISFIRE_POLICY_SKIP: "skip"}


def local_zone() -> str:
    """The terminal's IANA zone ($TZ, else /etc/localtime's target), else UTC."""
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz and "/" in tz and not tz.startswith("/"):
        return tz
    try:
        target = str(Path("/etc/localtime").resolve())
    except OSError:
        return "UTC"
    marker = "/zoneinfo/"
    return target.split(marker, 1)[1] if marker in target else "UTC"


def _when(ns: int) -> str:
    if not ns:
        return "-"
    return datetime.fromtimestamp(ns / 1e9).astimezone().strftime("%Y-%m-%d %H:%M %Z")


def _job(job: jpb.Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "cron": job.cron,
        "tz": job.tz,
        "prompt": job.prompt,
        "channel": "wechat" if job.channel == jpb.JOB_CHANNEL_WECHAT else "webchat",
        "deliver_to": job.deliver_to,
        "session": job.session,
        "misfire": _MISFIRE.get(job.misfire, "once"),
        "creator": job.creator or "owner",
        "creator_trust": job.creator_trust,
        "risk_ceiling": f"R{job.risk_ceiling}",
        "paused": job.paused,
        "paused_reason": job.paused_reason,
        "created_ns": job.created_ns,
        "source": job.source,
    }


def _view(view: jpb.JobView) -> dict[str, Any]:
    return {
        **_job(view.job),
        "next_ns": view.next_ns,
        "last_fired_ns": view.last_fired_ns,
        "fires": view.fires,
    }


def _line(v: dict[str, Any]) -> str:
    state = "paused" if v["paused"] else f"next {_when(v['next_ns'])}"
    return f"{v['id']}  '{v['cron']}' {v['tz']:<18} {state:<30} {v['prompt'][:50]}"


def _spec_lines(spec: jpb.JobSpec, next_ns: list[int]) -> list[str]:
    return [
        f"  cron:    {spec.cron}",
        f"  zone:    {spec.tz}",
        f"  prompt:  {spec.prompt}",
        "  channel: "
        + (
            f"wechat, to {spec.deliver_to} (and the job's own session)"
            if spec.channel == jpb.JOB_CHANNEL_WECHAT
            else "webchat (the job's own session)"
        ),
        f"  misfire: {_MISFIRE.get(spec.misfire, 'once')}",
        "  next:    " + (", ".join(_when(n) for n in next_ns) or "never"),
    ]


def add(args: argparse.Namespace, home: Home) -> Outcome:
    sentence: str | None = args.sentence
    as_json: bool = args.json
    misfire = jpb.MISFIRE_POLICY_SKIP if args.misfire == "skip" else jpb.MISFIRE_POLICY_ONCE
    with Client.connect(home.root) as core:
        if sentence is not None:
            if args.cron is not None or args.prompt is not None:
                raise CommandRefused("give a sentence, or --cron and --prompt, not both")
            compiled = core.compile_job(
                sentence, default_tz=args.tz or local_zone(), timeout=COMPILE_TIMEOUT_S
            )
            spec = compiled.spec
            spec.misfire = misfire
            _deliver(spec, args.deliver_to)
            if args.tz:
                spec.tz = args.tz
            if not args.yes:
                if as_json or not sys.stdin.isatty():
                    raise CommandRefused(
                        f"the sentence compiles to '{spec.cron}' in {spec.tz}, prompt "
                        f"{spec.prompt!r}; add --yes to make the job (off a terminal nothing "
                        "is made without it)"
                    )
                shown = [
                    "the sentence gives this schedule:",
                    *_spec_lines(spec, [*compiled.next_ns]),
                ]
                sys.stdout.write("\n".join(shown) + "\n")
                answer = input("make this job? [y/N] ")
                if answer.strip().lower() not in ("y", "yes"):
                    return Outcome(1, {"made": False}, ["cancelled: no job was made"])
        else:
            if args.cron is None or args.prompt is None:
                raise CommandRefused("give a sentence in quotes, or both --cron and --prompt")
            spec = jpb.JobSpec(
                cron=args.cron,
                tz=args.tz or "UTC",
                prompt=args.prompt,
                channel=jpb.JOB_CHANNEL_WEBCHAT,
                misfire=misfire,
            )
            _deliver(spec, args.deliver_to)
        if args.risk is not None:
            spec.risk_ceiling = int(args.risk[1])
        made = core.add_job(spec)
    data = {**_job(made.job), "seq": made.seq, "next_ns": list(made.next_ns)}
    lines = [
        f"job {made.job.id} made (ledger entry {made.seq}): '{made.job.cron}' in {made.job.tz}",
        "  next: " + (", ".join(_when(n) for n in made.next_ns) or "never"),
        f"  its runs are turns of session {made.job.session}",
    ]
    if made.job.deliver_to:
        lines.append(f"  each run's reply goes to {made.job.deliver_to} on WeChat")
    return Outcome(0, data, lines)


def _deliver(spec: jpb.JobSpec, target: str | None) -> None:
    if target is not None:
        spec.channel, spec.deliver_to = jpb.JOB_CHANNEL_WECHAT, target


def list_jobs(_args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        jobs = [_view(v) for v in core.jobs()]
    return Outcome(0, {"jobs": jobs}, [_line(v) for v in jobs] or ["no jobs"])


def show(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        got = core.job(args.id)
    view = _view(got.view)
    recent = [
        {
            "scheduled_ns": f.scheduled_ns,
            "fired_ns": f.fired_ns,
            "key": f.key,
            "catch_up": f.catch_up,
            "manual": f.manual,
            "missed": f.missed,
        }
        for f in got.recent
    ]
    lines = [
        f"{view['id']}: '{view['cron']}' in {view['tz']} ({view['misfire']} after downtime)",
        f"  prompt:  {view['prompt']}",
        f"  session: {view['session']} ({view['channel']}"
        + (f", delivered to {view['deliver_to']})" if view["deliver_to"] else ")"),
        f"  creator: {view['creator']} at {view['creator_trust']}, tools up to "
        f"{view['risk_ceiling']}",
        "  state:   " + (f"paused: {view['paused_reason']}" if view["paused"] else "running"),
        f"  next:    {_when(view['next_ns'])}; fired {view['fires']} time(s), last "
        f"{_when(view['last_fired_ns'])}",
    ]
    return Outcome(0, {**view, "recent": recent}, lines)


def _change(args: argparse.Namespace, home: Home, method: str, verb: str) -> Outcome:
    with Client.connect(home.root) as core:
        change = {"Pause": core.pause_job, "Resume": core.resume_job, "Remove": core.remove_job}
        got = change[method](args.id)
    said = f"job {got.job.id} {verb}" + (
        f" (ledger entry {got.seq})" if got.seq else " (it already was)"
    )
    return Outcome(0, {**_job(got.job), "seq": got.seq}, [said])


def pause(args: argparse.Namespace, home: Home) -> Outcome:
    return _change(args, home, "Pause", "paused")


def resume(args: argparse.Namespace, home: Home) -> Outcome:
    return _change(args, home, "Resume", "resumed")


def remove(args: argparse.Namespace, home: Home) -> Outcome:
    return _change(args, home, "Remove", "removed; naga rollback can bring it back")


def run(args: argparse.Namespace, home: Home) -> Outcome:
    with Client.connect(home.root) as core:
        got = core.run_job(args.id)
    fire = got.fire
    data = {"id": fire.job_id, "key": fire.key, "session": fire.session, "seq": got.fire_seq}
    lines = [
        f"job {fire.job_id} fired now (ledger entry {got.fire_seq}); its turn runs in session "
        f"{fire.session}: naga log {fire.session}"
    ]
    return Outcome(0, data, lines)


def _risk(text: str) -> str:
    if text.upper() not in ("R0", "R1", "R2", "R3", "R4"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a risk level (R0..R4)")
    return text.upper()


def add_commands(sub: Any, command: Any) -> None:
    """The ``job`` group (``command`` is _main's parser helper)."""
    job = sub.add_parser("job", help="scheduled jobs: add, list, show, pause, resume, remove, run")
    jsub = job.add_subparsers(dest="job_command", required=True, metavar="ACTION")
    a = command(jsub, "add", add, 'make a job: "every morning at seven ..." or --cron/--prompt')
    a.add_argument("sentence", nargs="?", default=None, metavar="SENTENCE")
    a.add_argument("--cron", default=None, help="five fields, e.g. '0 7 * * *'")
    a.add_argument("--prompt", default=None, help="what each run asks the agent")
    a.add_argument("--tz", default=None, help="IANA zone (default: UTC; a sentence: this one's)")
    a.add_argument("--misfire", choices=("once", "skip"), default="once",
                   help="after downtime: one catch-up run (default) or none")  # fmt: skip
    a.add_argument("--deliver-to", default=None, metavar="PEER",
                   help="send each run's reply to this WeChat peer: wechat:BOT/USER, "
                   "wechat:BOT (its owner) or wechat (the only binding's owner)")  # fmt: skip
    a.add_argument("--risk", type=_risk, default=None, help="tool risk ceiling R0..R4")
    a.add_argument("--yes", action="store_true", help="make it without asking")
    command(jsub, "list", list_jobs, "every job, its next fire")
    for name, handler, text in (
        ("show", show, "a job, its state and recent fires"),
        ("pause", pause, "stop a job firing (an effect)"),
        ("resume", resume, "let a paused job fire again (an effect)"),
        ("remove", remove, "remove a job (an effect: naga rollback restores it)"),
        ("run", run, "fire a job now, outside its schedule"),
    ):
        command(jsub, name, handler, text).add_argument("id", metavar="ID")


__all__ = ["add_commands", "local_zone"]
