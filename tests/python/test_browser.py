"""The `browser` family through the SDK's own `BrowserSandbox` methods, on headless Debian Chromium,
against loopback pages (tests/browser) served by the test."""
import base64
import functools
import io
import json
import os
import pathlib
import re
import shutil
import tempfile
import time

import pytest
from agentscope_runtime.sandbox.box.browser.browser_sandbox import BrowserSandbox

from browser_support import Pages, kill_browser, browser_boxd, failed, ok, serving, text
from conftest import Boxd

PAGES = pathlib.Path(__file__).resolve().parents[1] / "browser"
# boxd's own tools in the playwright group, beside upstream's 23 (tests/python/test_browser_sessions.py).
SESSION_TOOLS = {"browser_session_new", "browser_session_list", "browser_session_close"}

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed")


@pytest.fixture(scope="module")
def site():
    with serving(functools.partial(QuietHandler, directory=str(PAGES))) as url:
        yield url


REPORT = b"name,value\nanswer,42\n"


class QuietHandler(Pages):
    """The pages of tests/browser, plus `slow?ms=N` (a text answered after N ms, at most 2 s; `hang?ms=N`
    at most 8 s), `stall` (a no-store answer whose body stops after 10 bytes, for 8 s) and `attachment`
    (a CSV file sent as a download)."""

    def do_GET(self):
        path, _, query = self.path.partition("?")
        if path in ("/slow", "/hang"):
            # `hang` stands for a request that never ends within any of boxd's waits.
            cap = 2000 if path == "/slow" else 8000
            milliseconds = min(int(dict(part.split("=", 1) for part in query.split("&") if "=" in part)
                                   .get("ms", "0")), cap)
            time.sleep(milliseconds / 1000)
            self.answer(b"slow data", "text/plain")
        elif path == "/stall":
            # A no-store answer whose body starts and then stalls (for at most 8 s).
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", "1000000")
            self.end_headers()
            try:
                self.wfile.write(b"x" * 10)
                self.wfile.flush()
                time.sleep(8)
            except OSError:
                pass
        elif path == "/attachment":
            self.answer(REPORT, "text/csv", {"Content-Disposition": 'attachment; filename="report.csv"'})
        else:
            super().do_GET()


@pytest.fixture
def boxd(tmp_path):
    server = browser_boxd(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def browser(boxd):
    with boxd.client() as client:
        sandbox = BrowserSandbox.__new__(BrowserSandbox)
        sandbox.call_tool = client.call_tool
        yield sandbox


def ref(answer, role, name):
    match = re.search(rf'- {role} "{re.escape(name)}"[^\n]*\[ref=(e\d+)\]', answer)
    assert match, f"no {role} {name!r} in:\n{answer}"
    return match.group(1)


def test_navigate_snapshot_click_type_select_and_refs(browser, site):
    started = time.monotonic()
    page = ok(browser.browser_navigate(f"{site}/form.html"))
    assert time.monotonic() - started < 20
    assert f"- Page URL: {site}/form.html" in page
    assert "- Page Title: Form" in page
    assert "```yaml" in page
    assert '- heading "Test form" [level=1]' in page
    assert f"- /url: {site}/page2.html" in page
    snapshot = ok(browser.browser_snapshot())
    name, show = ref(snapshot, "textbox", "Name"), ref(snapshot, "button", "Show")

    ok(browser.browser_type("Name field", name, "hello"))
    after = ok(browser.browser_click("Show button", show))
    assert "You typed: hello" in after
    # Refs stay valid across actions while their element exists.
    assert ref(after, "button", "Show") == show
    assert "You typed: hello again" not in ok(browser.browser_type("Name field", name, "hello again"))
    assert "You typed: hello again" in ok(browser.browser_click("Show button", show))

    query = ref(after, "textbox", "Query")
    assert "Submitted: find me" in ok(browser.browser_type("Query", query, "find me", submit=True))
    keys = ref(after, "textbox", "Keys")
    assert "Keys: 3" in ok(browser.browser_type("Keys", keys, "abc", slowly=True))

    pick = ref(after, "combobox", "Pick")
    assert "Picked: b" in ok(browser.browser_select_option("Pick", pick, ["b"]))
    assert "Picked: a" in ok(browser.browser_select_option("Pick", pick, ["Apple"]))
    assert "the options are" in failed(browser.browser_select_option("Pick", pick, ["cherry"]))
    assert "not a select" in failed(browser.browser_select_option("Show", show, ["a"]))

    assert "not found" in failed(browser.browser_click("nothing", "e99999"))
    assert "refs look like e12" in failed(browser.browser_click("nothing", "button"))
    remove = ref(after, "button", "Remove output")
    gone_snapshot = ok(browser.browser_snapshot())
    out = re.search(r'- paragraph \[ref=(e\d+)\]: "?Picked', gone_snapshot).group(1)
    ok(browser.browser_click("Remove output", remove))
    assert "no longer in the page" in failed(browser.browser_click("output", out))


def test_dialogs_never_hang_and_are_answered(browser, site):
    page = ok(browser.browser_navigate(f"{site}/form.html"))
    alert = ok(browser.browser_click("Alert", ref(page, "button", "Alert")))
    assert "### Modal state" in alert and '"alert" dialog with message "Hello alert"' in alert
    refused = failed(browser.browser_snapshot())
    assert "does not handle the modal state" in refused
    ok(browser.browser_handle_dialog(accept=True))
    assert "No dialog visible" in failed(browser.browser_handle_dialog(accept=True))

    confirmed = ok(browser.browser_click("Confirm", ref(page, "button", "Confirm")))
    assert '"confirm" dialog' in confirmed
    assert "Confirmed: false" in ok(browser.browser_handle_dialog(accept=False))
    ok(browser.browser_click("Prompt", ref(page, "button", "Prompt")))
    assert "Prompted: Ada" in ok(browser.browser_handle_dialog(accept=True, prompt_text="Ada"))

    started = time.monotonic()
    loading = ok(browser.browser_navigate(f"{site}/alert-on-load.html"))
    assert time.monotonic() - started < 15
    assert '"alert" dialog with message "loaded"' in loading
    assert "After the alert" in ok(browser.browser_handle_dialog(accept=True))

    # A dialog left open in one tab holds up no other tab: boxd sends the blocked tab no frames.
    assert '"alert" dialog' in ok(browser.browser_navigate(f"{site}/alert-on-load.html"))
    started = time.monotonic()
    opened = ok(browser.browser_tab_new(f"{site}/page2.html"))
    # The other tab's dialog is said, and where to answer it.
    assert '"alert" dialog with message "loaded"] in tab 1' in opened, opened
    assert "in tab 1" in failed(browser.browser_handle_dialog(accept=True))
    for _ in range(3):
        shot = browser.browser_take_screenshot()
        assert shot["isError"] is False, shot
    assert time.monotonic() - started < 5
    ok(browser.browser_tab_select(1))
    assert "After the alert" in ok(browser.browser_handle_dialog(accept=True))
    assert "Page Two" in ok(browser.browser_tab_select(2))


def test_a_beforeunload_dialog_holds_navigate_until_answered(browser, site):
    page = ok(browser.browser_navigate(f"{site}/beforeunload.html"))
    ok(browser.browser_type("Draft", ref(page, "textbox", "Draft"), "words"))
    started = time.monotonic()
    held = ok(browser.browser_navigate(f"{site}/page2.html"))
    assert time.monotonic() - started < 5
    assert "waits for the page's dialog" in held and '"beforeunload" dialog' in held, held
    assert "Navigated to" not in held
    stayed = ok(browser.browser_handle_dialog(accept=False))
    assert "- Page Title: Draft" in stayed, stayed
    assert '"beforeunload" dialog' in ok(browser.browser_navigate(f"{site}/page2.html"))
    left = ok(browser.browser_handle_dialog(accept=True))
    assert "- Page Title: Page Two" in left, left


def test_tabs(browser, site):
    ok(browser.browser_navigate(f"{site}/form.html"))
    opened = ok(browser.browser_tab_new(f"{site}/page2.html"))
    assert "### Open tabs" in opened and "- 2: (current) [Page Two]" in opened
    assert "- Page Title: Page Two" in opened
    listed = ok(browser.browser_tab_list())
    assert "- 1: [Form]" in listed and "- 2: (current) [Page Two]" in listed
    assert "- Page Title: Form" in ok(browser.browser_tab_select(1))
    assert "from 1 to 2" in failed(browser.browser_tab_select(5))
    assert "from 1 to 2" in failed(browser.browser_tab_close(0))
    blank = ok(browser.browser_tab_new())
    assert "- 3: (current) [] (about:blank)" in blank
    # Without an index the current tab closes.
    closed = ok(browser.browser_tab_close())
    assert "about:blank" not in closed
    assert "Page Two" in ok(browser.browser_tab_list())
    ok(browser.browser_tab_close(2))
    assert ok(browser.browser_tab_list()).count("\n- ") == 1


def test_screenshot_pdf_and_resize(browser, boxd, site):
    ok(browser.browser_navigate(f"{site}/form.html"))
    shot = browser.browser_take_screenshot()
    assert shot["isError"] is False
    image = [item for item in shot["content"] if item["type"] == "image"][0]
    assert image["mimeType"] == "image/jpeg"
    assert base64.b64decode(image["data"])[:2] == b"\xff\xd8"
    saved = list(boxd.workspace.glob("page-*.jpeg"))
    assert len(saved) == 1 and saved[0].read_bytes()[:2] == b"\xff\xd8"

    ok(browser.browser_resize(800, 600))
    raw = browser.browser_take_screenshot(raw=True, filename="../../escape.png")
    png = base64.b64decode([item for item in raw["content"] if item["type"] == "image"][0]["data"])
    assert png[:4] == b"\x89PNG"
    assert int.from_bytes(png[16:20], "big") == 800 and int.from_bytes(png[20:24], "big") == 600
    assert (boxd.workspace / "escape.png").exists()
    assert not (boxd.workspace.parent.parent / "escape.png").exists()

    page = ok(browser.browser_snapshot())
    element = browser.browser_take_screenshot(element="Drop target", ref=ref(page, "region", "Drop target"))
    assert element["isError"] is False
    assert "Both element and ref" in failed(browser.browser_take_screenshot(element="Drop target"))

    ok(browser.browser_pdf_save())
    pdfs = list(boxd.workspace.glob("page-*.pdf"))
    assert len(pdfs) == 1 and pdfs[0].read_bytes()[:4] == b"%PDF"

    # A name that is not an image's or a PDF's never replaces a workspace file.
    (boxd.workspace / "main.py").write_text("print('kept')\n")
    assert "main.py.jpeg" in ok(browser.browser_take_screenshot(filename="main.py"))
    assert "main.py.pdf" in ok(browser.browser_pdf_save(filename="main.py"))
    assert (boxd.workspace / "main.py").read_text() == "print('kept')\n"


def test_wait_keys_hover_history_console_network(browser, site):
    page = ok(browser.browser_navigate(f"{site}/form.html"))
    assert "Either time, text or textGone" in failed(browser.browser_wait_for())
    ok(browser.browser_wait_for(time=0.1))
    ok(browser.browser_click("Delayed", ref(page, "button", "Delayed")))
    assert "Later text" in ok(browser.browser_wait_for(text="Later text"))
    ok(browser.browser_wait_for(text_gone="Not on the page"))
    started = time.monotonic()
    assert "Timed out" in failed(browser.browser_wait_for(text_gone="Test form"))
    assert time.monotonic() - started < 15

    hover = re.search(r"- note[^\n]*\[ref=(e\d+)\]", page).group(1)
    assert "Hovered!" in ok(browser.browser_hover("Hover target", hover))
    keys = ref(page, "textbox", "Keys")
    ok(browser.browser_click("Keys", keys))
    assert "Keys: 1" in ok(browser.browser_press_key("ArrowLeft"))
    assert "Unknown key" in failed(browser.browser_press_key("NoSuchKey"))

    console = ok(browser.browser_console_messages())
    assert "[LOG] form loaded" in console and "[WARN] careful" in console and "[LOG] data 42" in console
    network = ok(browser.browser_network_requests())
    assert f"[GET] {site}/form.html => [200] OK" in network
    assert f"[GET] {site}/data.json => [200] OK" in network

    second = ok(browser.browser_click("Second page", ref(page, "link", "Second page")))
    assert "- Page Title: Page Two" in second
    assert "- Page Title: Form" in ok(browser.browser_navigate_back())
    assert "- Page Title: Page Two" in ok(browser.browser_navigate_forward())
    assert "no page to go forward" in ok(browser.browser_navigate_forward())


def test_upload_stays_in_the_workspace_and_drag(browser, boxd, site):
    (boxd.workspace / "notes.txt").write_text("hello")
    page = ok(browser.browser_navigate(f"{site}/form.html"))
    assert "No file chooser visible" in failed(browser.browser_file_upload([str(boxd.workspace / "notes.txt")]))
    chooser = ok(browser.browser_click("Upload", ref(page, "button", "Upload")))
    assert "[File chooser]" in chooser
    assert "cannot upload" in failed(browser.browser_file_upload(["/etc/passwd"]))
    assert "Files: notes.txt" in ok(browser.browser_file_upload([str(boxd.workspace / "notes.txt")]))

    dropped = ok(browser.browser_drag("source", ref(page, "button", "Drag source"),
                                      "target", ref(page, "region", "Drop target")))
    assert "Dropped: payload" in dropped


def test_upload_takes_an_allowed_directory_and_no_link_out(tmp_path, site):
    workspace, shared = tmp_path / "workspace", tmp_path / "shared"
    workspace.mkdir()
    shared.mkdir()
    (shared / "data.csv").write_text("a,b\n")
    (workspace / "escape.txt").symlink_to("/etc/passwd")
    server = Boxd(workspace, "--tools", "browser", "--browser-headless", "--allow-dir", str(shared))
    try:
        with server.client() as client:
            browser = BrowserSandbox.__new__(BrowserSandbox)
            browser.call_tool = client.call_tool
            page = ok(browser.browser_navigate(f"{site}/form.html"))
            ok(browser.browser_click("Upload", ref(page, "button", "Upload")))
            refused = failed(browser.browser_file_upload([str(workspace / "escape.txt")]))
            assert "cannot upload" in refused and "--allow-dir" in refused, refused
            assert "Files: data.csv" in ok(browser.browser_file_upload([str(shared / "data.csv")]))
    finally:
        server.stop()


def test_a_crashed_browser_is_relaunched_and_said_so(browser, boxd, site):
    ok(browser.browser_navigate(f"{site}/page2.html"))
    assert kill_browser(boxd) > 0
    answer = ok(browser.browser_navigate(f"{site}/page2.html"))
    assert "The browser had exited" in answer and "- Page Title: Page Two" in answer
    assert "The browser had exited" not in ok(browser.browser_snapshot())
    assert "Closed the browser" in ok(browser.browser_close())
    assert "No browser was open" in ok(browser.browser_close())
    assert not [profile for profile in pathlib.Path(tempfile.gettempdir()).glob(f"boxd-browser-{boxd.proc.pid}-*")]


def browser_processes(parent):
    """The pids of Chromium's processes under `parent` (children of any of its threads)."""
    found, stack = [], [parent]
    for _ in range(10_000):
        if not stack:
            break
        pid = stack.pop()
        for children in pathlib.Path(f"/proc/{pid}/task").glob("*/children"):
            try:
                pids = [int(child) for child in children.read_text().split()]
            except OSError:
                continue
            stack.extend(pids)
            found.extend(child for child in pids if "chrom" in read_or_empty(f"/proc/{child}/comm"))
    return found


def read_or_empty(path):
    try:
        return pathlib.Path(path).read_text()
    except OSError:
        return ""


def test_chromium_starts_with_the_first_call_and_stops_with_browser_close(browser, boxd, site):
    assert browser_processes(boxd.proc.pid) == []
    ok(browser.browser_navigate(f"{site}/page2.html"))
    assert browser_processes(boxd.proc.pid)
    ok(browser.browser_close())
    deadline = time.monotonic() + 5
    while browser_processes(boxd.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert browser_processes(boxd.proc.pid) == []


def test_profiles_a_killed_boxd_left_behind_are_removed(browser, site):
    # No process has this PID (it is above Linux's largest): a boxd that was killed with its browser.
    stale = pathlib.Path(tempfile.gettempdir()) / "boxd-browser-999999999-0"
    (stale / "Default").mkdir(parents=True, exist_ok=True)
    ok(browser.browser_navigate(f"{site}/page2.html"))
    deadline = time.monotonic() + 5
    while stale.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not stale.exists()


def test_a_crashed_page_is_said_and_the_next_navigation_brings_the_tab_back(browser, site):
    page = ok(browser.browser_navigate(f"{site}/form.html"))
    show = ref(page, "button", "Show")
    started = time.monotonic()
    # Chromium's debug address crashes the tab's renderer, as running out of memory would.
    crashed = text(browser.browser_navigate("chrome://crash"))
    assert "### Page crashed" in crashed, crashed
    # Tools that need the page say so at once instead of waiting on a renderer that is gone.
    for refused in (failed(browser.browser_snapshot()), failed(browser.browser_click("Show", show))):
        assert "crashed" in refused and "browser_navigate" in refused, refused
    back = ok(browser.browser_navigate(f"{site}/page2.html"))
    assert "- Page Title: Page Two" in back and "crashed" not in back
    assert "Page Two" in ok(browser.browser_snapshot())
    assert time.monotonic() - started < 10


def test_a_missing_browser_is_an_error_answer_not_a_500(tmp_path, site):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    server = Boxd(workspace, "--tools", "browser", "--browser-executable", "/nonexistent/chromium")
    try:
        with server.client() as client:
            sandbox = BrowserSandbox.__new__(BrowserSandbox)
            sandbox.call_tool = client.call_tool
            assert "cannot start the browser" in failed(sandbox.browser_navigate(f"{site}/form.html"))
    finally:
        server.stop()


REFERENCE = pathlib.Path(os.environ.get(
    "BOXD_BROWSER_REFERENCE",
    pathlib.Path(__file__).resolve().parents[2] / "bench-out" / "reference-browser" / "node_modules" / "@playwright"
    / "mcp" / "cli.js"))


def reference_missing():
    """Why the reference @playwright/mcp cannot run here (a failure in CI, where `make test` installs it)."""
    missing = None
    if not REFERENCE.exists():
        missing = f"the reference @playwright/mcp 0.0.25 is not installed at {REFERENCE} (run scripts/setup.sh)"
    elif shutil.which("node") is None:
        missing = "node is not installed, the reference @playwright/mcp cannot run"
    if missing:
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)


# Calls whose arguments do not fit the tool's schema. `browser_handle_dialog` and `browser_file_upload`
# are left out: with no dialog or file chooser open, upstream refuses them for that before it reads
# their arguments. So are `null`s for optional arguments, which boxd takes as not given (the SDK sends
# them) and upstream refuses.
BAD_ARGUMENTS = [
    ("browser_navigate", {}),
    ("browser_navigate", {"url": 5}),
    ("browser_navigate", {"url": None}),
    ("browser_click", {}),
    ("browser_click", {"element": "Submit"}),
    ("browser_click", {"element": 1, "ref": ["e2"]}),
    ("browser_hover", {"ref": "e2"}),
    ("browser_type", {"element": "Name", "ref": "e2"}),
    ("browser_type", {"element": "Name", "ref": "e2", "text": "x", "submit": "yes"}),
    ("browser_type", {"element": "Name", "ref": "e2", "text": 42, "slowly": 1}),
    ("browser_select_option", {"element": "Pick", "ref": "e3", "values": "b"}),
    ("browser_select_option", {"element": "Pick", "ref": "e3", "values": ["a", 2, None]}),
    ("browser_press_key", {"key": 13}),
    ("browser_drag", {"startElement": "a", "endRef": 4}),
    ("browser_resize", {"width": "800", "height": 600}),
    ("browser_resize", {}),
    ("browser_tab_select", {"index": "2"}),
    ("browser_tab_select", {}),
    ("browser_tab_close", {"index": "last"}),
    ("browser_tab_new", {"url": 7}),
    ("browser_wait_for", {"time": "5"}),
    ("browser_take_screenshot", {"raw": "no", "filename": 3}),
    ("browser_pdf_save", {"filename": False}),
]


def test_bad_arguments_are_answered_as_the_reference_playwright_mcp_answers(boxd, tmp_path):
    reference_missing()
    (tmp_path / "host").mkdir()
    host = Boxd(tmp_path / "host", "--tools", "mcp")
    try:
        with host.client() as client:
            client.add_mcp_servers({"mcpServers": {"playwright": {
                "command": "node", "args": [str(REFERENCE), "--headless"],
                "env": {"PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"}}}})
            reference = [client.call_tool(name, arguments) for name, arguments in BAD_ARGUMENTS]
    finally:
        host.stop()
    with boxd.client() as client:
        ours = [client.call_tool(name, arguments) for name, arguments in BAD_ARGUMENTS]
    for (name, arguments), theirs, mine in zip(BAD_ARGUMENTS, reference, ours):
        assert theirs["isError"] is True and "invalid_type" in text(theirs), (name, arguments, theirs)
        assert (mine["isError"], text(mine)) == (True, text(theirs)), (name, arguments)


def page_state(answer):
    """What a snapshot says about the page, whatever its YAML shape: field values (inline after the ref, or as a
    child's text), the selected option of each select, and the paragraphs' texts."""
    yaml = answer.split("```yaml", 1)[1].split("```", 1)[0]
    lines = [(len(line) - len(line.lstrip()), line.strip()) for line in yaml.splitlines() if line.strip()]
    unquote = lambda value: value.strip().strip('"')  # noqa: E731
    state = {"paragraphs": []}
    for index, (indent, line) in enumerate(lines):
        children = []
        for child_indent, child in lines[index + 1:]:
            if child_indent <= indent:
                break
            children.append(child)
        field = re.match(r'- (textbox|combobox) "([^"]*)"[^:]*(?::(.*))?$', line)
        if field and field.group(1) == "textbox":
            inline = (field.group(3) or "").strip()
            texts = [re.sub(r"^- (generic|text)[^:]*: ?", "", child) for child in children]
            state[field.group(2)] = unquote(inline or "".join(texts))
        elif field:
            state[field.group(2)] = [re.match(r'- option "([^"]*)"', child).group(1)
                                     for child in children if "[selected]" in child]
        paragraph = re.match(r"- paragraph[^:]*: (.*)$", line)
        if paragraph:
            state["paragraphs"].append(unquote(paragraph.group(1)))
    return state


def scripted_session(call, site):
    """The same session on either server; returns the page state after the click and at the end."""
    page = text(call("browser_navigate", {"url": f"{site}/form.html"}))
    refs = {name: ref(page, role, name)
            for role, name in (("textbox", "Name"), ("button", "Show"), ("textbox", "Query"), ("combobox", "Pick"))}
    for step, arguments in (
        ("browser_type", {"element": "Name field", "ref": refs["Name"], "text": "hello"}),
        ("browser_click", {"element": "Show button", "ref": refs["Show"]}),
        ("browser_type", {"element": "Query field", "ref": refs["Query"], "text": "world"}),
        ("browser_select_option", {"element": "Pick", "ref": refs["Pick"], "values": ["b"]}),
    ):
        answer = call(step, arguments)
        assert answer["isError"] is False, (step, answer)
        if step == "browser_click":
            after_click = page_state(text(answer))
    final = call("browser_snapshot", {})
    assert final["isError"] is False, final
    return after_click, page_state(text(final))


def test_same_page_outcomes_as_the_reference_playwright_mcp(browser, boxd, site, tmp_path):
    # `make test` installs both (scripts/setup.sh): in CI a missing reference is a failure, not a skip.
    reference_missing()
    config = tmp_path / "playwright-mcp.json"
    config.write_text(json.dumps({"browser": {"browserName": "chromium", "isolated": True, "launchOptions": {
        "executablePath": shutil.which("chromium"), "headless": True, "chromiumSandbox": False}}}))
    (tmp_path / "host").mkdir()
    host = Boxd(tmp_path / "host", "--tools", "mcp")
    try:
        with host.client() as client:
            client.add_mcp_servers({"mcpServers": {"playwright": {
                "command": "node", "args": [str(REFERENCE), "--config", str(config)],
                "env": {"PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"}}}})
            reference_tools = client.list_tools()["playwright"]
            reference = scripted_session(client.call_tool, site)
    finally:
        host.stop()
    with boxd.client() as client:
        our_tools = client.list_tools()["playwright"]
    # boxd's own tools of the group (sessions) are no upstream's.
    assert {name for name in our_tools if name.startswith("browser_session_")} == SESSION_TOOLS
    our_tools = {name: tool for name, tool in our_tools.items() if name not in SESSION_TOOLS}
    # The 23 tools the SDK calls, under upstream's names and descriptions (0.0.25 also lists
    # browser_install and browser_generate_playwright_test, which have no use without Playwright).
    assert len(our_tools) == 23 and set(our_tools) <= set(reference_tools)
    describe = lambda tool: tool["json_schema"]["function"]["description"]
    assert {name: describe(tool) for name, tool in our_tools.items()} == \
        {name: describe(reference_tools[name]) for name in our_tools}
    # Their input schemas, key for key (boxd derives each from the tool's argument struct), but for the
    # optional arguments boxd adds, each listed by name in tests/upstream-schemas/extensions.json.
    added = json.loads((pathlib.Path(__file__).resolve().parents[1] / "upstream-schemas" / "extensions.json")
                       .read_text())["playwright"]
    parameters = lambda tool: tool["json_schema"]["function"]["parameters"]

    def upstream_part(name, schema):
        schema = json.loads(json.dumps(schema))
        for argument in added.get(name, []):
            assert argument not in schema.get("required", []), (name, argument)
            del schema["properties"][argument]
        return schema

    assert {name: upstream_part(name, parameters(tool)) for name, tool in our_tools.items()} == \
        {name: parameters(reference_tools[name]) for name in our_tools}
    ours = scripted_session(browser.call_tool, site)

    assert reference == ours
    after_click, final = ours
    assert "You typed: hello" in after_click["paragraphs"]
    assert final == {"paragraphs": ["Picked: b", "Keys: 0"], "Query": "world", "Name": "hello", "Keys": "",
                     "Pick": ["Banana"]}


def test_same_origin_iframe_content_is_in_the_snapshot_and_its_refs_act(browser, site):
    page = ok(browser.browser_navigate(f"{site}/frames.html"))
    assert re.search(r'^- iframe "Inner frame" \[ref=e\d+\]:$', page, re.M), page
    field = re.search(r'^  - textbox "Inner field" \[ref=(f1e\d+)\]$', page, re.M)
    button = re.search(r'^  - button "Inner" \[ref=(f1e\d+)\]$', page, re.M)
    assert field and button, page
    assert "Inner idle" in page and "Outer idle" in page

    ok(browser.browser_type("Inner field", field.group(1), "hi"))
    after = ok(browser.browser_click("Inner button", button.group(1)))
    assert "Inner says: hi" in after
    # The page's own refs still act beside the frame's.
    assert "Outer clicked" in ok(browser.browser_click("Outer", ref(after, "button", "Outer")))
    assert "refs look like e12" in failed(browser.browser_click("nothing", "fe3"))


def test_frames_past_the_bound_are_said_to_be_cut(browser, site):
    page = ok(browser.browser_navigate(f"{site}/many-frames.html"))
    assert len(re.findall(r'- button "Button \d+"', page)) == 16, page
    assert "- Frames cut: the page has more than 16 frames" in page


@pytest.mark.parametrize("executable", ["/usr/bin/chromium", "chromium"])
def test_cross_origin_iframe_content_is_in_the_snapshot_and_its_refs_act(tmp_path, site, executable):
    # Chromium (with site isolation) runs a frame of another site in another renderer process, reached
    # through a session of its own; the headless shell (the default "chromium" when headless) keeps it
    # in the page's process. Both show and act alike.
    if executable.startswith("/") and not os.path.exists(executable):
        pytest.skip(f"{executable} is not installed")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello")
    server = Boxd(workspace, "--tools", "browser", "--browser-headless", "--browser-executable", executable)
    try:
        with server.client() as client:
            browser = BrowserSandbox.__new__(BrowserSandbox)
            browser.call_tool = client.call_tool
            page = ok(browser.browser_navigate(f"{site}/frames-cross.html"))
            assert re.search(r'^- iframe "Cross frame" \[ref=e\d+\]:$', page, re.M), page
            field = re.search(r'^  - textbox "Cross field" \[ref=(f1e\d+)\]$', page, re.M)
            button = re.search(r'^  - button "Cross" \[ref=(f1e\d+)\]$', page, re.M)
            pick = re.search(r'^  - combobox "Cross pick" \[ref=(f1e\d+)\]', page, re.M)
            upload = re.search(r'^  - button "Cross upload" \[ref=(f1e\d+)\]', page, re.M)
            assert field and button and pick and upload, page
            assert "Cross idle" in page and "Outer idle" in page
            # The frame in the frame (back on the page's site) is nested under its own iframe line.
            assert re.search(r'^  - iframe "Nested frame" \[ref=f1e\d+\]:\n(    .*\n)*    - button "Inner" '
                             r'\[ref=f2e\d+\]', page, re.M), page
            nested = re.search(r'^    - button "Inner" \[ref=(f2e\d+)\]$', page, re.M).group(1)

            ok(browser.browser_type("Cross field", field.group(1), "hi"))
            after = ok(browser.browser_click("Cross button", button.group(1)))
            assert "Cross says: hi" in after
            # Refs stay valid across actions while their element exists.
            assert f'- button "Cross" [ref={button.group(1)}]' in after
            assert "Cross picked: b" in ok(browser.browser_select_option("Cross pick", pick.group(1), ["b"]))
            ok(browser.browser_hover("Cross button", button.group(1)))
            shot = browser.browser_take_screenshot(element="Cross button", ref=button.group(1))
            assert shot["isError"] is False, shot
            chooser = ok(browser.browser_click("Cross upload", upload.group(1)))
            assert "[File chooser]" in chooser
            assert "Cross files: notes.txt" in ok(browser.browser_file_upload([str(workspace / "notes.txt")]))
            # The nested frame's own refs act, and the page's own refs still act beside the frames'.
            assert "Inner idle" in after
            ok(browser.browser_type("Inner field", re.search(
                r'^    - textbox "Inner field" \[ref=(f2e\d+)\]$', after, re.M).group(1), "deep"))
            assert "Inner says: deep" in ok(browser.browser_click("Inner button", nested))
            assert "Outer clicked" in ok(browser.browser_click("Outer", ref(after, "button", "Outer")))
            # The frame goes to another page (back on the page's site): its old refs get "take a new
            # snapshot", never a 500 or a hang, and the new page shows under the same iframe line.
            leave = re.search(r'^  - link "Leave" \[ref=(f1e\d+)\]', after, re.M).group(1)
            ok(browser.browser_click("Leave", leave))
            for _ in range(20):
                moved = ok(browser.browser_snapshot())
                if re.search(r'^  - heading "Second page"', moved, re.M):
                    break
                time.sleep(0.1)
            assert re.search(r'^- iframe "Cross frame" \[ref=e\d+\]:\n  - heading "Second page"', moved, re.M), moved
            stale = failed(browser.browser_click("Cross button", button.group(1)))
            assert "new snapshot" in stale, stale
    finally:
        server.stop()


def test_navigation_settles_by_observation_not_a_fixed_quiet_window(browser, site):
    # A request the page sends after its load event is waited for: its answer is in the snapshot.
    started = time.monotonic()
    late = ok(browser.browser_navigate(f"{site}/late-data.html"))
    assert "Loaded: slow data" in late, late
    assert time.monotonic() - started < 10
    # A static page is done once it loaded: no quiet window is waited out. The old settle waited at
    # least 100 ms of DOM quiet after every load; the fastest of a few navigations shows the floor (on
    # a loaded machine more of them may be needed to see one under it: up to 30).
    ok(browser.browser_navigate(f"{site}/page2.html"))
    took = []
    while len(took) < 8 or (min(took) >= 0.095 and len(took) < 30):
        started = time.monotonic()
        answer = ok(browser.browser_navigate(f"{site}/page2.html"))
        took.append(time.monotonic() - started)
        assert "- Page Title: Page Two" in answer
    assert min(took) < 0.095, took
    # A page changing in its load handler is not settled at the first look: the answer's snapshot, asked
    # for together with that look, is dropped and taken again once the page is quiet.
    changed = ok(browser.browser_navigate(f"{site}/load-change.html"))
    assert "Changed after load" in changed, changed


def test_a_page_whose_load_never_fires_is_answered_within_one_cap(browser, site):
    started = time.monotonic()
    # Its image hangs: no load event, a request in flight, the main frame loading: one 3 s cap for all.
    page = ok(browser.browser_navigate(f"{site}/hang-image.html"))
    assert time.monotonic() - started < 4.5
    assert "Waiting for an image" in page
    # The page works meanwhile, and an action is not held by the load it did not start.
    started = time.monotonic()
    assert "Clicked" in ok(browser.browser_click("Click", ref(page, "button", "Click")))
    assert time.monotonic() - started < 1.5


def test_an_unread_no_store_response_never_wedges_a_call(browser, site):
    started = time.monotonic()
    page = ok(browser.browser_navigate(f"{site}/no-store.html"))
    assert time.monotonic() - started < 4.5
    assert "Headers: 200" in page, page
    started = time.monotonic()
    assert "Clicked" in ok(browser.browser_click("Click", ref(page, "button", "Click")))
    assert "Unread no-store response" in ok(browser.browser_snapshot())
    assert time.monotonic() - started < 1.5


def test_a_child_frame_still_loading_does_not_hold_an_action(browser, site):
    page = ok(browser.browser_navigate(f"{site}/late-frame.html"))
    started = time.monotonic()
    # The frame's document takes 2 s; the action is done when the page itself is quiet.
    added = ok(browser.browser_click("Add frame", ref(page, "button", "Add frame")))
    assert time.monotonic() - started < 1.5
    assert "Frame added" in added


def test_elements_that_only_look_clickable_get_refs_and_long_runs_collapse(browser, site):
    page = ok(browser.browser_navigate(f"{site}/clickable.html"))
    # A card (cursor: pointer and a click listener, its role generic) keeps its own ref around the
    # heading it holds; an empty icon with a pointer and a focusable box get refs where they had none.
    card = re.search(r'^- generic \[ref=(e\d+)\] \[cursor=pointer\]:\n  - heading "Card title"', page, re.M)
    assert card, page
    icon = re.search(r'^- generic \[ref=(e\d+)\] \[cursor=pointer\]$', page, re.M)
    assert icon, page
    box = re.search(r'^- generic \[ref=(e\d+)\]$', page, re.M)
    assert box, page
    assert "Hidden action" not in page and "Aria-hidden action" not in page
    # Laid out without any size: nothing shows, nothing to act on.
    assert "Zero-size field" not in page and "Zero-size frame" not in page and "Page Two" not in page
    assert "Icon clicked" in ok(browser.browser_click("icon", icon.group(1)))
    assert "Card opened" in ok(browser.browser_click("card", card.group(1)))
    assert "Box focused" in ok(browser.browser_click("box", box.group(1)))

    # 60 rows: the first 10 shown, the row holding a link kept, the others said in one notice.
    assert "Row 10" in page and "Row 11" not in page and "Row 60" not in page
    assert re.search(r"^  # 49 more listitem elements like those above are not shown", page, re.M), page
    link = ref(page, "link", "Item link 45")
    assert "#item-45" in ok(browser.browser_click("link", link))
    # Interactive siblings are never collapsed.
    assert all(f'- button "Button {n}"' in page for n in range(1, 26))


def test_downloads_land_in_the_workspace_and_the_answer_says_where(browser, boxd, site):
    # Upstream's browser image sets the output directory to the workspace: a download is saved there under
    # its suggested name.
    page = ok(browser.browser_navigate(f"{site}/download.html"))
    link = ref(page, "link", "Get the report")
    workspace = boxd.workspace
    first = ok(browser.browser_click("report link", link))
    assert "### Downloads" in first, first
    assert f"- Downloaded file report.csv to {workspace / 'report.csv'}" in first, first
    assert (workspace / "report.csv").read_bytes() == REPORT
    # The next one never replaces it, and the first is not said again.
    second = ok(browser.browser_click("report link", link))
    assert f"to {workspace / 'report-1.csv'}" in second and second.count("- Downloaded file") == 1, second
    assert (workspace / "report-1.csv").read_bytes() == REPORT
    assert "### Downloads" not in ok(browser.browser_snapshot())
    # A navigation that turns into a download is no failure either.
    direct = ok(browser.browser_navigate(f"{site}/attachment"))
    assert f"to {workspace / 'report-2.csv'}" in direct, direct
    # Nothing else lands in the workspace: no partial files, no `downloads/`.
    assert sorted(path.name for path in workspace.iterdir()) == ["report-1.csv", "report-2.csv", "report.csv"]


def test_frames_paced_by_boxd_screenshots_show_the_last_change_and_pages_keep_animating(browser, site):
    """Headless, boxd draws the tabs' frames itself (a screenshot is taken from a frame drawn for it, not
    after the browser's next two or three 60 Hz ticks): the frame holds the change made just before,
    the page's own animation frames keep coming between calls (fast after a call, slower when idle),
    and a tab the page opened by itself is drawn too."""
    from PIL import Image  # pillow comes with the client's dependencies

    page = ok(browser.browser_navigate(f"{site}/paced.html"))
    ok(browser.browser_click("Green button", ref(page, "button", "Green")))
    shot = browser.browser_take_screenshot(raw=True)
    png = base64.b64decode([item for item in shot["content"] if item["type"] == "image"][0]["data"])
    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert image.size == (1024, 768)
    assert image.getpixel((600, 500)) == (0, 128, 0)

    def frames():
        counts = re.findall(r"frames (\d+)", ok(browser.browser_console_messages()))
        return int(counts[-1]) if counts else 0

    first = frames()
    # Past the lively window after a call, into the idle pace; a frozen page would not count on. A
    # loaded machine draws fewer frames in that time: looked at again, a second apart, for a while.
    time.sleep(3)
    deadline = time.monotonic() + 20
    while frames() < first + 8 and time.monotonic() < deadline:
        time.sleep(1)
    assert frames() >= first + 8

    ok(browser.browser_click("Open button", ref(page, "button", "Open")))
    # The popup's title is listed once its page has loaded, which a loaded machine may not have done
    # when the click answers: looked at again until it has, for a while.
    deadline = time.monotonic() + 20
    listed = ok(browser.browser_tab_list())
    while "[Page Two]" not in listed and time.monotonic() < deadline:
        time.sleep(0.2)
        listed = ok(browser.browser_tab_list())
    assert "[Page Two]" in listed, listed
    ok(browser.browser_tab_select(2))
    popup = browser.browser_take_screenshot()
    assert popup["isError"] is False, popup
    image = [item for item in popup["content"] if item["type"] == "image"][0]
    assert base64.b64decode(image["data"])[:2] == b"\xff\xd8"
