"""A real browser for the dashboard's pages: Debian's headless Chromium driven by Selenium
through Debian's chromedriver (``./scripts/test`` installs ``chromium chromium-driver``;
missing, the tests fail under ``CI=true`` and skip elsewhere), and the dashboard served by
uvicorn in a thread of the test process."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from servers import free_port
from support import unavailable

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture(scope="session")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Headless Chromium for the session (a profile of its own; no network beyond
    127.0.0.1 needed), its console log kept (``browser.get_log("browser")``)."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            unavailable(f"{path} is not installed (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tmp_path_factory.mktemp("chromium-profile")
    for argument in (
        "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--no-first-run", f"--user-data-dir={profile}", "--window-size=1280,900",
    ):  # fmt: skip
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(chromium: Any, serve: Callable[..., str]) -> Iterator[Any]:
    """The session's browser on a blank page, its console emptied; blank again at the end,
    before the test's dashboard stops (``serve``'s teardown comes after this one): a page
    left open would go on polling a server that is gone (the overview's refresh, its
    plots), and its console errors would be the next test's."""
    chromium.get("about:blank")
    chromium.get_log("browser")
    yield chromium
    chromium.get("about:blank")


@pytest.fixture
def serve() -> Iterator[Callable[..., str]]:
    """``serve(app)``: the ASGI app served by uvicorn on a free port of 127.0.0.1, in a
    thread; its base URL. Stopped at the test's end."""
    import uvicorn

    servers: list[tuple[Any, threading.Thread]] = []

    def start(app: Any) -> str:
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                pytest.fail("the dashboard's server did not start")
            time.sleep(0.05)
        servers.append((server, thread))
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def db_file(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'queue.db'}"
