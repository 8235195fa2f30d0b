"""The WebChat console in real headless Chromium (Debian's chromium and
chromium-driver, driven by selenium), phone-sized, against a gateway and a
fake core: send and see the reply stream in, reload and see the history,
abort a long reply, undo to an earlier entry and see the state change.

Chromium and chromedriver are system packages (``.ci/run`` installs them;
README "Tests"). Without them this test fails and says so: the console is
part of the product and must not go untested silently.
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from naga_gateway import CODE_REFUSED, NOT_LOGGED_IN, Gateway, GatewayConfig, GrpcCore
from tests.agent.conftest import ServerThread, model_server
from tests.fakes.turn_core import FakeCore
from tests.gateway._login import conn_state, core_codes, login_browser, login_url

__all__ = ["model_server"]  # a fixture, used by name

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 15.0


class _GatewayThread:
    """A gateway on its own trio loop in a thread, so the (synchronous)
    browser driver can run in the test's thread."""

    def __init__(self, socket: str) -> None:
        self._socket = socket
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self.port = 0
        self._thread = threading.Thread(target=lambda: trio.run(self._main), daemon=True)

    async def _main(self) -> None:
        core = GrpcCore(self._socket, "Capability test")
        try:
            with trio.CancelScope() as scope:
                self._scope = scope
                self._token = trio.lowlevel.current_trio_token()
                gateway = Gateway(core, GatewayConfig(port=0))
                async with trio.open_nursery() as nursery:
                    self.port = await nursery.start(gateway.serve)
                    self._ready.set()
        finally:
            core.close()

    def __enter__(self) -> _GatewayThread:
        self._thread.start()
        if not self._ready.wait(WAIT_S):
            raise RuntimeError("the gateway did not start")
        return self

    def __exit__(self, *_exc: object) -> None:
        assert self._token is not None
        assert self._scope is not None
        trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        self._thread.join(WAIT_S)


def _driver(profile: str) -> Any:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not installed: the console's browser test needs Debian's "
            "chromium and chromium-driver (apt-get install -y chromium chromium-driver)"
        )
    webdriver = _selenium("selenium.webdriver")
    service = _selenium("selenium.webdriver.chrome.service").Service
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=390,844",  # a phone
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=service(executable_path=CHROMEDRIVER))


def _selenium(module: str) -> Any:
    # Imported by name so that the type checker passes where the dev extra
    # is not installed yet; the test itself then fails and says why.
    try:
        return importlib.import_module(module)
    except ImportError:
        pytest.fail("selenium is not installed: pip install -e '.[dev]' (a dev dependency)")


@pytest.fixture
def browser() -> Iterator[Any]:
    with tempfile.TemporaryDirectory(prefix="gw-chrome-") as profile:
        driver = _driver(profile)
        try:
            yield driver
        finally:
            driver.quit()


@pytest.fixture
def other_browser() -> Iterator[Any]:
    """A second browser profile: its own cookies, nobody's login."""
    with tempfile.TemporaryDirectory(prefix="gw-chrome-2-") as profile:
        driver = _driver(profile)
        try:
            yield driver
        finally:
            driver.quit()


def _wait(driver: Any, what: str, check: Callable[[Any], Any]) -> Any:
    timeout: type[Exception] = _selenium("selenium.common.exceptions").TimeoutException
    wait = _selenium("selenium.webdriver.support.ui").WebDriverWait
    try:
        return wait(driver, WAIT_S, poll_frequency=0.05).until(check)
    except timeout:
        raise AssertionError(f"timed out waiting for {what}") from None


def _texts(driver: Any, selector: str) -> list[str]:
    # Read in one script: the console re-renders lists, so element handles
    # fetched one by one can go stale between calls.
    script = "return [...document.querySelectorAll(arguments[0])].map((e) => e.textContent)"
    return list(driver.execute_script(script, selector))


def _click(driver: Any, selector: str) -> bool:
    script = "const e = document.querySelector(arguments[0]); if (e) e.click(); return !!e"
    return bool(driver.execute_script(script, selector))


def test_console_end_to_end(fake_core: tuple[FakeCore, str], browser: Any) -> None:
    by_id_ = "id"  # selenium's By.ID
    enter: str = _selenium("selenium.webdriver.common.keys").Keys.ENTER

    core, socket = fake_core
    with _GatewayThread(socket) as gw:
        d = browser
        by_id: Callable[[str], Any] = lambda i: d.find_element(by_id_, i)  # noqa: E731
        login_browser(d, gw.port, core.login_code())

        by_id("text").send_keys("hello browser", enter)
        _wait(
            d,
            "the streamed reply",
            lambda _: "echo: hello browser" in _texts(d, "#messages li.assistant.final .md"),
        )

        d.refresh()
        _wait(d, "reconnect", lambda _: by_id("conn").get_attribute("data-state") == "open")
        _wait(
            d,
            "the history after a reload",
            lambda _: _texts(d, "#messages li .bubble") == ["hello browser", "echo: hello browser"],
        )

        core.slow_delay = 0.05
        by_id("text").send_keys("slow and long", enter)
        _wait(
            d,
            "the long reply to start",
            lambda _: any(t.startswith("w0") for t in _texts(d, "#messages li.assistant .md")),
        )
        _wait(d, "the stop button", lambda _: by_id("abort").is_enabled())
        by_id("abort").click()
        _wait(
            d,
            "the aborted reply",
            lambda _: any("Stopped" in t for t in _texts(d, "#messages li.error .turn-error")),
        )
        assert core.idle()

        # Undo to the first reply: the slow turn's entries go.
        keep = next(e.seq for e in core.entries if e.text == "echo: hello browser")
        by_id("menu").click()  # phone-sized: the session pane is a menu
        _click(d, '#pages button[data-page="rollback"]')
        _wait(
            d,
            "the ledger entries",
            lambda _: _click(d, f'#page-rollback button.undo[data-seq="{keep}"]'),
        )
        _wait(d, "the dry-run preview", lambda _: by_id("preview").is_displayed())
        assert "This undoes 1 effect" in by_id("preview-summary").text
        assert len(core.entries) == 3, "the preview changed nothing"
        by_id("confirm-undo").click()
        _wait(d, "the entries after undo", lambda _: len(_texts(d, "#page-rollback tbody tr")) == 2)
        assert [e.text for e in core.entries] == ["hello browser", "echo: hello browser"]
        by_id("menu").click()
        _click(d, '#pages button[data-page="chat"]')
        _wait(
            d,
            "the chat after undo",
            lambda _: _texts(d, "#messages li .bubble") == ["hello browser", "echo: hello browser"],
        )


def test_the_owner_logs_in_by_the_link_and_a_browser_without_it_is_refused(
    fake_core: tuple[FakeCore, str], browser: Any, other_browser: Any
) -> None:
    """The login link logs one browser in (the code leaves the address bar;
    the cookie is HttpOnly and SameSite=Strict; a reload stays logged in);
    a second profile is refused with the sentence that says how to log in,
    and the same link, already used, does not log it in."""
    core, socket = fake_core
    with _GatewayThread(socket) as gw:
        d, other = browser, other_browser
        d.get(f"http://127.0.0.1:{gw.port}/")
        _wait(d, "the refusal", lambda _: conn_state(d) == "logged out")
        assert _attr(d, "login", "textContent") == NOT_LOGGED_IN

        link = login_url(gw.port, core.login_code())
        d.get(link)
        _wait(d, "the connection", lambda _: conn_state(d) == "open")
        assert d.current_url == f"http://127.0.0.1:{gw.port}/", "the code left the address bar"
        assert d.execute_script("return document.cookie") == "", "no script reads the cookie"
        (cookie,) = d.get_cookies()
        assert (cookie["httpOnly"], cookie["sameSite"], cookie["path"]) == (True, "Strict", "/")
        assert _texts(d, "#title") == ["Naga owner"]

        d.refresh()
        _wait(d, "the connection after a reload", lambda _: conn_state(d) == "open")

        other.get(f"http://127.0.0.1:{gw.port}/")
        _wait(other, "the refusal", lambda _: conn_state(other) == "logged out")
        assert _attr(other, "login", "textContent") == NOT_LOGGED_IN
        other.get(link)  # the link again: spent by its first use
        _wait(other, "the refused link", lambda _: _attr(other, "login", "textContent") != "")
        _wait(
            other,
            "the spent link's refusal",
            lambda _: _attr(other, "login", "textContent") == CODE_REFUSED,
        )
        assert conn_state(other) == "logged out"
        assert other.get_cookies() == []


def test_the_console_is_package_data() -> None:
    from importlib import resources

    static = resources.files("naga_gateway").joinpath("static")
    names = {Path(str(p)).name for p in static.iterdir()}
    assert {"index.html", "app.js", "app.css"} <= names


def test_the_console_on_a_real_core_answers(
    browser: Any, tmp_path: Path, model_server: ServerThread
) -> None:
    """Nothing faked but the model: `naga daemon start` with its gateway; the
    console sends a message that a sandboxed executor answers through the
    provider plugin, and shows it again after a reload; the core's session
    history holds the same."""
    import socket as socketlib

    from naga.sdk import Client
    from tests.agent.conftest import write_providers
    from tests.daemon.conftest import start_core_process
    from tests.fakes.model_server import Reply

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    write_providers(str(home), model_server.server.openai_url)
    model_server.script(Reply.answer("a real answer", usage=(9, 3)))
    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    core = start_core_process(str(home), tmp_path / "core.log", gateway_port=port)
    enter: str = _selenium("selenium.webdriver.common.keys").Keys.ENTER
    d = browser
    try:
        login_browser(d, port, core_codes(str(home))())
        d.find_element("id", "text").send_keys("hello real core", enter)
        _wait(
            d,
            "the reply",
            lambda _: "a real answer" in _texts(d, "#messages li.assistant.final .md"),
        )
        d.refresh()
        _wait(
            d,
            "the history after a reload",
            lambda _: _texts(d, "#messages li .bubble") == ["hello real core", "a real answer"],
        )
        with Client.connect(str(home)) as c:
            (session,) = [s.session for s in c.sessions()]
            assert [e.text for e in c.session_history(session)] == [
                "hello real core",
                "a real answer",
            ]
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- core log ---\n{core.output()[-3000:]}") from None
    finally:
        import os
        import signal

        os.kill(core.pid, signal.SIGTERM)
        assert core.proc.wait(60) == 0, core.output()


def _attr(d: Any, element_id: str, name: str) -> str | None:
    value: str | None = d.find_element("id", element_id).get_attribute(name)
    return value
