"""The console's chat in real headless Chromium against a real core (only
the model is a fake over loopback HTTP), at a laptop's and a phone's size:
the thinking state, Markdown made safe, code blocks with a copy button,
usage and times, tool cards that survive a reload, a growing text box,
auto-scroll that stops when the reader scrolls up, partial text kept on an
error and on Stop (also after a reload), and error text without a
validation dump. Screenshots go to the test's output directory."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from naga.sdk import Client
from tests.agent.conftest import ServerThread, model_server
from tests.fakes.model_server import Reply
from tests.gateway import _console as c

__all__ = ["model_server"]  # the fixture, used by name

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def core(
    tmp_path_factory: pytest.TempPathFactory, model_server: ServerThread
) -> Iterator[c.RealCore]:
    with c.real_core(tmp_path_factory.mktemp("console-chat"), model_server) as core:
        with Client.connect(core.home) as client:
            client.enable_plugin("clock", wait=20.0)
        yield core


def _two(found: list[str]) -> list[str] | None:
    return found if len(found) == 2 else None


def _release(model: ServerThread, name: str) -> None:
    model.run(lambda: model.server.release(name))


MARKDOWN = (
    "Here is **bold**, `inline code` and a [link](https://example.org).\n\n"
    "```python\nprint('hello')\n```\n\n"
    '<img src="x" onerror="window.pwned=1"><script>window.pwned=2</script>'
)


@pytest.mark.parametrize("size", sorted(c.SIZES))
def test_a_reply_thinks_then_renders_markdown_safely_with_usage(
    size: str, core: c.RealCore, tmp_path: Path
) -> None:
    session = f"md-{size}"
    core.model.script(Reply.answer(MARKDOWN, usage=(12, 5), hold=f"think-{size}"))
    with c.browser(c.SIZES[size]) as d:
        c.open_console(d, core.port, f"/#s={session}", home=core.home)
        c.type_and_send(d, "show me markdown")
        c.wait(
            d, "the thinking state", lambda _: c.texts(d, "#messages .md.thinking") == ["Thinking"]
        )
        c.shoot(d, tmp_path, f"chat-thinking-{size}")
        _release(core.model, f"think-{size}")
        c.wait(
            d,
            "the reply",
            lambda _: c.texts(d, "#messages li.assistant.final .md strong") == ["bold"],
        )
        assert c.texts(d, "#messages li.assistant.final .md :not(pre) > code") == ["inline code"]
        assert c.js(d, "return window.pwned === undefined")
        assert (
            c.js(
                d,
                "return document.querySelectorAll('#messages script, #messages [onerror]').length",
            )
            == 0
        )
        link = c.js(
            d, "const a = document.querySelector('#messages .md a'); return [a.target, a.rel]"
        )
        assert link == ["_blank", "noopener noreferrer"]
        font = c.js(
            d, "return getComputedStyle(document.querySelector('.codeblock pre')).fontFamily"
        )
        assert "mono" in font.lower(), font
        assert [t.rstrip("\n") for t in c.texts(d, ".codeblock pre")] == ["print('hello')"]
        d.find_element("css selector", ".codeblock .copy").click()
        c.wait(
            d, "the copy button's answer", lambda _: c.texts(d, ".codeblock .copy") == ["Copied"]
        )
        (meta,) = c.texts(d, "#messages li.assistant.final .meta")
        assert re.fullmatch(
            r"\d\d:\d\d( [AP]M)? · 12 \+ 5 tokens · 1 model call · \d+ (ms|\.\d s)", meta
        ) or re.fullmatch(
            r"\d\d:\d\d( [AP]M)? · 12 \+ 5 tokens · 1 model call · [\d.]+ m?s", meta
        ), meta
        assert len(c.texts(d, "#messages li.user .meta time")) == 1
        c.shoot(d, tmp_path, f"chat-markdown-{size}")
        d.refresh()
        c.wait(d, "the console again", lambda _: c.ready(d))
        c.wait(
            d,
            "the reply after a reload",
            lambda _: c.texts(d, "#messages li.assistant.final .md strong") == ["bold"],
        )
        (meta,) = c.texts(d, "#messages li.assistant.final .meta")
        assert "12 + 5 tokens · 1 model call" in meta


def test_human_error_drops_a_validation_dump(core: c.RealCore) -> None:
    dump = (
        "bad params for send: 1 validation error for SendParams\ntext\n"
        "  String should have at least 1 character [type=string_too_short, input_value='', "
        "input_type=str]\n    For further information visit https://errors.pydantic.dev/2.5/v/string"
    )
    with c.browser(c.SIZES["desktop"]) as d:
        c.open_console(d, core.port, home=core.home)
        said = c.js(d, "return Naga.util.humanError('invalid_params', arguments[0])", dump)
    assert said == (
        "The gateway refused the request: bad params for send: text; "
        "String should have at least 1 character"
    )


@pytest.mark.parametrize("size", sorted(c.SIZES))
def test_tool_cards_show_arguments_result_and_survive_a_reload(
    size: str, core: c.RealCore, tmp_path: Path
) -> None:
    core.model.script(
        Reply.answer(tool_calls=(("call-1", "clock__now", '{"timezone": "UTC"}'),)),
        Reply.answer("It is noon."),
    )
    with c.browser(c.SIZES[size]) as d:
        c.open_console(d, core.port, f"/#s=tools-{size}", home=core.home)
        c.type_and_send(d, "what time is it?")
        c.wait(
            d,
            "the answer",
            lambda _: c.texts(d, "#messages li.assistant.final .md") == ["It is noon."],
        )

        def card() -> Any:
            return c.js(
                d,
                "const t = document.querySelector('#messages .tool');"
                "return t && [t.querySelector('.tname').textContent,"
                " t.querySelector('.tstate').textContent, t.querySelector('.tstate').dataset.ok,"
                " [...t.querySelectorAll('pre')].map((p) => p.textContent)]",
            )

        name, state, ok, pres = card()
        assert (name, ok) == ("clock.now", "true")
        assert state.startswith("done")
        assert '"timezone": "UTC"' in pres[0]
        assert '"utc"' in pres[1]
        c.click(d, "#messages .tool summary")
        c.shoot(d, tmp_path, f"chat-tool-{size}")
        d.refresh()
        c.wait(d, "the console again", lambda _: c.ready(d))
        c.wait(d, "the card after a reload", lambda _: card() is not None)
        name, state, ok, pres = card()
        assert (name, ok) == ("clock.now", "true")
        assert re.fullmatch(r"done · \d+ ms", state), state
        assert '"timezone": "UTC"' in pres[0]
        assert '"utc"' in pres[1]


@pytest.mark.parametrize("size", sorted(c.SIZES))
def test_partial_text_stays_on_stop_and_on_error_also_after_a_reload(
    size: str, core: c.RealCore, tmp_path: Path
) -> None:
    gate = trio.Event()
    core.model.script(Reply.held("Once upon a time there was a console", gate, pieces=4))
    with c.browser(c.SIZES[size]) as d:
        c.open_console(d, core.port, f"/#s=stop-{size}", home=core.home)
        c.type_and_send(d, "tell me a story")
        c.wait(
            d,
            "the first words",
            lambda _: any(t.startswith("Once") for t in c.texts(d, "#messages li.assistant .md")),
        )
        c.wait(d, "the stop button", lambda _: d.find_element("id", "abort").is_enabled())
        d.find_element("id", "abort").click()
        c.wait(
            d,
            "the stop note",
            lambda _: (
                c.texts(d, "#messages li.error .turn-error") == ["Stopped before the reply ended."]
            ),
        )
        (kept,) = c.texts(d, "#messages li.error .md")
        assert kept.startswith("Once")
        core.model.run(gate.set)
        core.model.script(
            Reply.stream_error(
                "Half an answer",
                after_events=2,
                error_type="server_error",
                message="the GPU melted",
            )
        )
        c.type_and_send(d, "try again")
        notes = c.wait(d, "the error", lambda _: _two(c.texts(d, "#messages li.error .turn-error")))
        assert notes[1].startswith("Error (model): "), notes
        assert "melted" in notes[1]
        partials = c.wait(
            d, "the partial text", lambda _: _two(c.texts(d, "#messages li.error .md"))
        )
        assert partials[1].startswith("Half"), partials
        c.shoot(d, tmp_path, f"chat-stop-and-error-{size}")
        d.refresh()
        c.wait(d, "the console again", lambda _: c.ready(d))
        c.wait(
            d,
            "both after a reload",
            lambda _: len(c.texts(d, "#messages li.error .turn-error")) == 2,
        )
        assert c.texts(d, "#messages li.error .turn-error")[0] == "Stopped before the reply ended."
        assert c.texts(d, "#messages li.error .md")[0].startswith("Once")
        assert c.texts(d, "#messages li.user .bubble") == ["tell me a story", "try again"]


@pytest.mark.parametrize("size", sorted(c.SIZES))
def test_the_box_grows_and_scrolling_up_stops_the_follow(size: str, core: c.RealCore) -> None:
    keys = c.selenium("selenium.webdriver.common.keys").Keys
    long = "\n\n".join(f"Paragraph {i}: " + "words " * 20 for i in range(40))
    core.model.script(Reply.answer(long))
    gate = trio.Event()
    core.model.script(Reply.held("Streaming " + "more " * 200, gate, pieces=4))
    with c.browser(c.SIZES[size]) as d:
        c.open_console(d, core.port, f"/#s=scroll-{size}", home=core.home)
        box = d.find_element("id", "text")
        one = box.size["height"]
        chain = c.selenium("selenium.webdriver.common.action_chains").ActionChains
        box.click()
        for line in ("line one", "line two"):
            box.send_keys(line)
            chain(d).key_down(keys.SHIFT).send_keys(keys.ENTER).key_up(keys.SHIFT).perform()
        box.send_keys("three")
        assert box.get_attribute("value") == "line one\nline two\nthree"
        assert box.size["height"] > one * 1.8, (one, box.size["height"])
        box.send_keys(keys.ENTER)
        assert box.size["height"] == one, "the box shrinks back once sent"
        c.wait(d, "the long reply", lambda _: len(c.texts(d, "#messages li.assistant.final")) == 1)
        at_bottom = (
            "const s = document.getElementById('scroller');"
            " return s.scrollHeight - s.scrollTop - s.clientHeight < 50"
        )
        c.wait(d, "the view to follow the reply", lambda _: c.js(d, at_bottom))
        c.type_and_send(d, "and more")
        c.wait(
            d,
            "the next reply to stream",
            lambda _: any(
                t.startswith("Streaming") for t in c.texts(d, "#messages li.assistant .md")
            ),
        )
        c.js(
            d,
            "const s = document.getElementById('scroller'); s.scrollTop = 0;"
            " s.dispatchEvent(new Event('scroll'))",
        )
        core.model.run(gate.set)
        c.wait(
            d, "the streamed reply", lambda _: len(c.texts(d, "#messages li.assistant.final")) == 2
        )
        assert c.js(d, "return document.getElementById('scroller').scrollTop") == 0, "it followed"
        assert d.find_element("id", "jump").is_displayed()
        d.find_element("id", "jump").click()
        c.wait(d, "the jump to the end", lambda _: c.js(d, at_bottom))
