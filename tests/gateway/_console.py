"""Helpers for the console's browser tests (tests/gateway/test_console_*.py):
real headless Chromium (Debian's chromium + chromedriver, driven by
selenium) at a desktop and a phone size, a real core with its gateway, and
screenshots under the test's output directory.

Every test opens the console through :func:`open_console` and nothing
else, so that a login step (a one-time link, a cookie) is added in one
place.
"""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Callable, Generator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.agent.conftest import ServerThread, write_providers
from tests.daemon.conftest import CoreProcess, start_core_process
from tests.gateway._login import core_codes, login_browser

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 20.0
#: The sizes every view is checked at: a laptop and a phone.
SIZES = {"desktop": (1280, 800), "phone": (390, 844)}
AXE = Path(__file__).parent / "vendor" / "axe.min.js"


def selenium(module: str) -> Any:
    # Imported by name so that the type checker passes where the dev extra
    # is not installed yet; the test itself then fails and says why.
    try:
        return importlib.import_module(module)
    except ImportError:
        pytest.fail("selenium is not installed: pip install -e '.[dev]' (a dev dependency)")


def driver(profile: str, size: tuple[int, int], *, dark: bool = False) -> Any:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not installed: the console's browser test needs Debian's "
            "chromium and chromium-driver (apt-get install -y chromium chromium-driver)"
        )
    webdriver = selenium("selenium.webdriver")
    service = selenium("selenium.webdriver.chrome.service").Service
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
        "--hide-scrollbars",
        f"--window-size={size[0]},{size[1]}",
        f"--user-data-dir={profile}",
        *(["--force-dark-mode", "--blink-settings=preferredColorScheme=0"] if dark else []),
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(options=options, service=service(executable_path=CHROMEDRIVER))
    # --window-size sets the window, not the viewport: make the viewport exact.
    d.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": size[0], "height": size[1], "deviceScaleFactor": 1, "mobile": size[0] < 500},
    )
    return d


@contextmanager
def browser(size: tuple[int, int], *, dark: bool = False) -> Generator[Any]:
    with tempfile.TemporaryDirectory(prefix="console-chrome-") as profile:
        d = driver(profile, size, dark=dark)
        try:
            yield d
        finally:
            d.quit()


def open_console(d: Any, port: int, path: str = "/", *, home: str | None = None) -> None:
    """Open the console and wait until it is connected and has drawn its
    session. The one way every test opens it: logged in first as the owner
    of ``home`` (tests.gateway._login), when this browser is not yet."""
    if home is not None and not d.get_cookies():
        login_browser(d, port, core_codes(home)())
        d.get("about:blank")  # a full load of `path` next, not a fragment change
    d.get(f"http://127.0.0.1:{port}{path}")
    wait(d, "the console to connect", lambda _: ready(d))


def ready(d: Any) -> bool:
    return bool(
        d.execute_script(
            "return document.body.dataset.ready === '1' && "
            "document.getElementById('conn').dataset.state === 'open'"
        )
    )


def wait(d: Any, what: str, check: Callable[[Any], Any], timeout: float = WAIT_S) -> Any:
    expired: type[Exception] = selenium("selenium.common.exceptions").TimeoutException
    waiter = selenium("selenium.webdriver.support.ui").WebDriverWait
    try:
        return waiter(d, timeout, poll_frequency=0.05).until(check)
    except expired:
        logs = "\n".join(str(e) for e in d.get_log("browser")[-10:])
        raise AssertionError(f"timed out waiting for {what}\n--- browser log ---\n{logs}") from None


def texts(d: Any, selector: str) -> list[str]:
    # One script: the console re-renders lists, so handles fetched one by
    # one can go stale between calls.
    script = "return [...document.querySelectorAll(arguments[0])].map((e) => e.textContent)"
    return list(d.execute_script(script, selector))


def js(d: Any, script: str, *args: Any) -> Any:
    return d.execute_script(script, *args)


def click(d: Any, selector: str) -> bool:
    script = "const e = document.querySelector(arguments[0]); if (e) e.click(); return !!e"
    return bool(d.execute_script(script, selector))


def type_and_send(d: Any, text: str) -> None:
    keys = selenium("selenium.webdriver.common.keys").Keys
    box = d.find_element("id", "text")
    box.send_keys(text, keys.ENTER)


def show_page(d: Any, page: str) -> None:
    """Open a page from the side bar (through the menu on a phone)."""
    if d.find_element("id", "menu").is_displayed():
        d.find_element("id", "menu").click()
    d.find_element("css selector", f'#pages button[data-page="{page}"]').click()
    if page != "chat":
        wait(
            d,
            f"the {page} page",
            lambda _: js(d, f"return !!document.querySelector('#page-{page} .body[data-ready]')"),
        )


def shoot(d: Any, out: Path, name: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    d.save_screenshot(str(path))
    return path


_OVERFLOW_JS = r"""
const w = document.documentElement.clientWidth;
const out = [];
for (const e of document.querySelectorAll('body *')) {
  const r = e.getBoundingClientRect();
  if (!r.width || !r.height) continue;
  let clipped = false;  // inside a box that scrolls or clips sideways
  for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
    const ox = getComputedStyle(p).overflowX;
    if (ox === 'auto' || ox === 'scroll' || ox === 'hidden') { clipped = true; break; }
  }
  if (clipped) continue;
  if (r.width > w + 1 || r.right > w + 1) {
    const cls = typeof e.className === 'string' && e.className ? '.' + e.className.split(' ').join('.') : '';
    out.push(e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + cls +
      ' ' + Math.round(r.width) + 'px, right edge ' + Math.round(r.right));
  }
}
const sw = document.documentElement.scrollWidth;
return sw > w + 1 ? out.concat(['document ' + sw + 'px']) : out;
"""  # noqa: E501


def overflowing(d: Any) -> list[str]:
    """Visible elements wider than the viewport or reaching past its right
    edge (by more than a pixel), outside a box that scrolls sideways: what
    makes a phone page scroll sideways."""
    return list(d.execute_script(_OVERFLOW_JS))


def axe(d: Any) -> list[dict[str, Any]]:
    """axe-core's violations of the page as it is now (serious and critical)."""
    d.execute_script(AXE.read_text(encoding="utf-8"))
    result: dict[str, Any] = d.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']})"
        ".then((r) => done(r), (e) => done({error: String(e)}));"
    )
    assert "error" not in result, result
    return [
        {
            "id": v["id"],
            "impact": v["impact"],
            "help": v["help"],
            "nodes": [n["target"] for n in v["nodes"]][:5],
        }
        for v in result["violations"]
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class RealCore:
    """A real `naga daemon start` with its gateway, and the fake model."""

    home: str
    port: int
    process: CoreProcess
    model: ServerThread

    def stop(self) -> None:
        if self.process.proc.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            assert self.process.proc.wait(60) == 0, self.process.output()[-3000:]


@contextmanager
def real_core(tmp: Path, model: ServerThread, port: int | None = None) -> Generator[RealCore]:
    home = tmp / "home"
    home.mkdir(mode=0o700, exist_ok=True)
    write_providers(str(home), model.server.openai_url)
    port = port or free_port()
    proc = start_core_process(str(home), tmp / "core.log", gateway_port=port)
    core = RealCore(str(home), port, proc, model)
    try:
        yield core
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- core log ---\n{proc.output()[-3000:]}") from None
    finally:
        core.stop()
