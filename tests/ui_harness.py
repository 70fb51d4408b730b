"""Drive the Dagster UI the way a person does: started as `make ui` starts it, looked at in a real browser.

``DagsterUI.start(workdir)`` runs ``bash scripts/ui.sh`` (``dagster dev``: webserver + daemon on 127.0.0.1) on a
free port, with its own ``DAGSTER_HOME`` and ``LAKEHOUSE_HOME`` under ``workdir``, in its own process group, and
waits until the code location ``lakehouse`` is loaded. Then:

- ``ui.query(text, variables)`` posts a GraphQL query to ``/graphql`` and returns its ``data`` (errors raise);
- ``wait_for(predicate, timeout, what)`` polls until ``predicate()`` is truthy (a runs or sensors check, say);
- ``ui.screenshot(page_path, file, expect_text=..., expect_selector=...)`` opens the page in headless Chromium
  (Debian's ``/usr/bin/chromium`` through Playwright; never ``playwright install``), clicks away the first-visit
  community dialog as a person would, waits for the expected content, runs ``action(page)`` if given (a click on
  a filter, say) and saves a PNG under ``artifacts_dir()``;
- ``ui.page(page_path)`` gives the same ready Playwright page, to click through the UI;
- ``ui.stop()`` (or leaving the ``with`` block) closes the browser and stops the whole process group.

Screenshots go to ``<repo>/.artifacts/ui/``, or ``$LAKEHOUSE_TEST_ARTIFACTS/ui/`` when that variable is set.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page, Playwright

REPO = Path(__file__).resolve().parents[1]
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
LOCATION = "lakehouse"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
VIEWPORT = {"width": 1600, "height": 1000}
# The first-visit dialog of `dagster dev` on 127.0.0.1/localhost ("Join the Dagster community", e-mail field,
# buttons "Skip" and "Submit"). "Skip" records it as seen, in the browser and in DAGSTER_HOME/.nux.
COMMUNITY_DIALOG_TITLE = "Join the Dagster community"
COMMUNITY_DIALOG_DISMISS = "Skip"

WORKSPACE_QUERY = """
query LocationStatus {
  workspaceOrError {
    __typename
    ... on Workspace {
      locationEntries {
        name
        loadStatus
        locationOrLoadError {
          __typename
          ... on RepositoryLocation { name repositories { name } }
          ... on PythonError { message cause { message cause { message } } }
        }
      }
    }
    ... on PythonError { message }
  }
}
"""

T = TypeVar("T")


class UIError(RuntimeError):
    """The UI did not come up, stopped, or did not show what was expected."""


class GraphQLError(RuntimeError):
    """The GraphQL endpoint answered with errors."""


def artifacts_dir() -> Path:
    """Where screenshots go: ``$LAKEHOUSE_TEST_ARTIFACTS/ui`` or ``<repo>/.artifacts/ui`` (git-ignored)."""
    root = Path(os.environ.get("LAKEHOUSE_TEST_ARTIFACTS") or REPO / ".artifacts")
    folder = root / "ui"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(
    predicate: Callable[[], T],
    timeout: float,
    what: str,
    *,
    interval: float = 0.5,
    ignore: tuple[type[BaseException], ...] = (),
    detail: Callable[[], str] | None = None,
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    Exceptions of the ``ignore`` types count as "not yet"; any other exception propagates at once. On time-out,
    ``TimeoutError`` names ``what``, the last ignored exception, and ``detail()`` (a log tail, say).
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except ignore as error:
            last_error = error
        if time.monotonic() >= deadline:
            message = f"timed out after {timeout:g} s waiting for {what}"
            if last_error is not None:
                message += f" (last error: {last_error!r})"
            if detail is not None:
                message += "\n" + detail()
            raise TimeoutError(message)
        time.sleep(interval)


def graphql(url: str, text: str, variables: dict[str, Any] | None = None, timeout: float = 30) -> dict[str, Any]:
    """POST one GraphQL operation and return its ``data``; a response with ``errors`` raises ``GraphQLError``."""
    body = json.dumps({"query": text, "variables": variables or {}}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.load(response)
    except urllib.error.HTTPError as error:
        # Dagster answers a malformed query with 400 and the errors in the body.
        payload = error.read().decode(errors="replace")
        try:
            answer = json.loads(payload)
        except ValueError:
            raise GraphQLError(f"HTTP {error.code} from {url}: {payload[:500]}") from error
    if answer.get("errors"):
        raise GraphQLError("; ".join(e.get("message", str(e)) for e in answer["errors"]))
    return answer["data"]


@dataclass(frozen=True)
class Shot:
    """One saved screenshot: the PNG, the page's final address, and its visible text when it was taken."""

    path: Path
    url: str
    text: str


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after its last ")".
        state, _ppid, pgrp = stat[stat.rindex(")") + 2 :].split()[:3]
        if int(pgrp) == pgid and state != "Z":
            members.append(int(entry.name))
    return members


def _default_sigint() -> None:
    # A shell that starts pytest in the background ignores SIGINT for it, and `dagster dev` maps SIGTERM to the
    # SIGINT handler: with SIGINT ignored it could not be stopped. Give the UI Ctrl-C's usual meaning back.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass
class DagsterUI:
    """A running ``scripts/ui.sh`` (``dagster dev``) and, once a page is opened, a headless Chromium."""

    process: subprocess.Popen[bytes]
    port: int
    workdir: Path
    log_path: Path
    _playwright: Playwright | None = field(default=None, repr=False)
    _browser: Browser | None = field(default=None, repr=False)
    _context: BrowserContext | None = field(default=None, repr=False)
    _dialog_dismissed: bool = field(default=False, repr=False)

    # ----------------------------------------------------------------------------------------- life cycle

    @classmethod
    def start(cls, workdir: Path, *, ready_timeout: float = 120, env: dict[str, str] | None = None) -> DagsterUI:
        """Run ``bash scripts/ui.sh`` as ``make ui`` does and wait until the code location is loaded.

        ``workdir`` gets ``dagster/`` (DAGSTER_HOME), ``home/`` (LAKEHOUSE_HOME) and ``dagster-ui.log``; ``env``
        adds or overrides variables (LAKEHOUSE_* settings, say).
        """
        workdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        log_path = workdir / "dagster-ui.log"
        child_env = {
            **os.environ,
            "DAGSTER_HOME": str(workdir / "dagster"),
            "LAKEHOUSE_HOME": str(workdir / "home"),
            "DAGSTER_PORT": str(port),
            "PYSPARK_PYTHON": str(VENV_PYTHON),
            **(env or {}),
        }
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                ["bash", "scripts/ui.sh"],
                cwd=REPO,
                env=child_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: webserver, daemon and code servers stop together
                preexec_fn=_default_sigint,
            )
        ui = cls(process=process, port=port, workdir=workdir, log_path=log_path)
        try:
            ui.wait_until_loaded(ready_timeout)
        except BaseException:
            ui.stop()
            raise
        print(f"[ui] Dagster UI at {ui.url} (log: {log_path})")
        return ui

    def __enter__(self) -> DagsterUI:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no server log)"
        tail = "\n".join(text.splitlines()[-lines:])
        return f"--- last {lines} lines of {self.log_path} ---\n{tail}"

    def _check_running(self) -> None:
        if self.process.poll() is not None:
            raise UIError(f"scripts/ui.sh exited with code {self.process.returncode}\n{self.log_tail()}")

    def wait_until_loaded(self, timeout: float) -> None:
        """Until GraphQL answers and the location ``lakehouse`` is LOADED; a load error or an exit fails at once."""

        def loaded() -> bool:
            self._check_running()
            workspace = self.query(WORKSPACE_QUERY)["workspaceOrError"]
            if workspace["__typename"] != "Workspace":
                return False
            for entry in workspace["locationEntries"]:
                if entry["name"] != LOCATION:
                    continue
                location = entry["locationOrLoadError"] or {}
                if location.get("__typename") == "PythonError":
                    messages, error = [], location
                    while error:
                        messages.append(error["message"].strip())
                        error = error.get("cause")
                    raise UIError(f"code location {LOCATION!r} failed to load: " + "\ncaused by: ".join(messages))
                return entry["loadStatus"] == "LOADED" and location.get("__typename") == "RepositoryLocation"
            return False

        wait_for(
            loaded,
            timeout,
            f"the Dagster UI on {self.url} to load code location {LOCATION!r}",
            ignore=(OSError, GraphQLError, ValueError),
            detail=self.log_tail,
        )

    def stop(self, timeout: float = 30) -> None:
        """Close the browser, then stop the process group as Ctrl-C does (SIGINT), and SIGKILL what remains."""
        self._close_browser()
        pgid = self.process.pid  # start_new_session: the group's id is the leader's pid
        for sig in (signal.SIGINT, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
            try:
                wait_for(
                    lambda: self.process.poll() is not None and not _group_members(pgid),
                    timeout if sig == signal.SIGINT else 10,
                    f"process group {pgid} to exit",
                    interval=0.2,
                )
                break
            except TimeoutError:
                if sig == signal.SIGKILL:
                    raise
        self.process.wait(timeout=10)

    # ------------------------------------------------------------------------------------------- GraphQL

    def query(self, text: str, variables: dict[str, Any] | None = None, timeout: float = 30) -> dict[str, Any]:
        """One GraphQL operation against this UI's ``/graphql``; returns ``data``, raises on ``errors``."""
        return graphql(f"{self.url}/graphql", text, variables, timeout)

    # ------------------------------------------------------------------------------------------- browser

    def _browser_context(self) -> BrowserContext:
        if self._context is None:
            from playwright.sync_api import sync_playwright

            self._playwright = sync_playwright().start()
            self._browser = self._playwright.chromium.launch(
                executable_path=CHROMIUM, args=list(CHROMIUM_ARGS), headless=True
            )
            # One context for the whole session: what a page stores (the dismissed dialog) holds for the next.
            self._context = self._browser.new_context(viewport=VIEWPORT)
        return self._context

    def _close_browser(self) -> None:
        for closable in (self._context, self._browser):
            if closable is not None:
                with contextlib.suppress(Exception):
                    closable.close()
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                self._playwright.stop()
        self._playwright = self._browser = self._context = None

    def _dismiss_community_dialog(self, page: Page, timeout: float) -> None:
        """Click "Skip" on the first-visit community dialog, if the server says it is due (it opens after ~1 s)."""
        if self._dialog_dismissed or not self.query("query { shouldShowNux }")["shouldShowNux"]:
            self._dialog_dismissed = True
            return
        dialog = page.get_by_role("dialog").filter(has_text=COMMUNITY_DIALOG_TITLE)
        dialog.wait_for(state="visible", timeout=timeout * 1000)
        dialog.get_by_role("button", name=COMMUNITY_DIALOG_DISMISS, exact=True).click()
        dialog.wait_for(state="hidden", timeout=timeout * 1000)
        wait_for(
            lambda: not self.query("query { shouldShowNux }")["shouldShowNux"], timeout, "the dialog to be recorded"
        )
        self._dialog_dismissed = True

    @contextlib.contextmanager
    def page(
        self,
        page_path: str,
        *,
        expect_text: Iterable[str] = (),
        expect_selector: Iterable[str] = (),
        timeout: float = 30,
    ) -> Iterator[Page]:
        """A browser tab on ``page_path``, the community dialog clicked away, the expected content shown.

        ``expect_text``: strings that must appear in the page's visible text; ``expect_selector``: Playwright
        selectors that must be visible. Missing ones after ``timeout`` seconds raise ``UIError``, and so does a
        dialog still covering the page.
        """
        page = self._browser_context().new_page()
        try:
            self._prepare(page, page_path, tuple(expect_text), tuple(expect_selector), timeout)
            yield page
        finally:
            page.close()

    def screenshot(
        self,
        page_path: str,
        file: str,
        *,
        expect_text: Iterable[str] = (),
        expect_selector: Iterable[str] = (),
        timeout: float = 30,
        full_page: bool = False,
        action: Callable[[Page], None] | None = None,
    ) -> Shot:
        """Open ``page_path`` as ``page()`` does, save it as ``artifacts_dir() / file`` and print the path.

        ``action(page)``, when given, runs on the ready page before the shot: what a person clicks first (a
        filter, a tab) and waits for. When the page does not become ready, or the action fails, the PNG is
        saved all the same (to see why), then the error raised.
        """
        path = artifacts_dir() / file
        page = self._browser_context().new_page()
        try:
            try:
                self._prepare(page, page_path, tuple(expect_text), tuple(expect_selector), timeout)
                if action is not None:
                    action(page)
                    self._settle(page)
            finally:
                page.screenshot(path=str(path), full_page=full_page)
                print(f"[ui] screenshot of {page_path}: {path}")
            return Shot(path=path, url=page.url, text=page.inner_text("body"))
        finally:
            page.close()

    def screenshot_file(self, shown: Path, file: str, *, expect_text: Iterable[str] = (), timeout: float = 30) -> Shot:
        """A local HTML file (the data-quality report) in the same browser, saved as ``artifacts_dir() / file``
        once its ``expect_text`` shows."""
        path = artifacts_dir() / file
        page = self._browser_context().new_page()
        try:
            page.goto(shown.resolve().as_uri(), wait_until="load", timeout=timeout * 1000)
            page.wait_for_function(
                "texts => texts.every(t => document.body && document.body.innerText.includes(t))",
                arg=list(expect_text),
                timeout=timeout * 1000,
                polling=250,
            )
            self._settle(page)
            page.screenshot(path=str(path))
            print(f"[ui] screenshot of {shown}: {path}")
            return Shot(path=path, url=page.url, text=page.inner_text("body"))
        finally:
            page.close()

    def _prepare(
        self, page: Page, page_path: str, texts: tuple[str, ...], selectors: tuple[str, ...], timeout: float
    ) -> None:
        self._check_running()
        page.goto(self.url + page_path, wait_until="domcontentloaded", timeout=timeout * 1000)
        self._await_content(page, texts, selectors, timeout)
        self._dismiss_community_dialog(page, timeout)
        self._settle(page)
        covering = page.get_by_role("dialog").filter(visible=True)
        if covering.count():
            raise UIError(f"a dialog covers {page_path}: {covering.first.inner_text()[:200]!r}")

    def _await_content(self, page: Page, texts: tuple[str, ...], selectors: tuple[str, ...], timeout: float) -> None:
        # The app shell first, then what the caller expects.
        wanted = ("Overview", *texts)
        try:
            page.wait_for_function(
                "texts => texts.every(t => document.body && document.body.innerText.includes(t))",
                arg=list(wanted),
                timeout=timeout * 1000,
                polling=250,
            )
            for selector in selectors:
                page.locator(selector).first.wait_for(state="visible", timeout=timeout * 1000)
        except Exception as error:
            body = page.inner_text("body") if page.locator("body").count() else ""
            missing = [t for t in wanted if t not in body]
            missing += [s for s in selectors if not page.locator(s).filter(visible=True).count()]
            raise UIError(
                f"{page.url} did not show {missing} within {timeout:g} s; visible text starts: {body[:300]!r}"
            ) from error

    @staticmethod
    def _settle(page: Page) -> None:
        """Fonts loaded, and a moment for the graph's layout to finish moving."""
        page.evaluate("document.fonts.ready.then(() => true)")
        page.wait_for_timeout(750)
