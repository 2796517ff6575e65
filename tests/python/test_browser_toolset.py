"""Anthropic's browser toolset (`browser_toolset_20260801`) as boxd serves it (`browser_toolset`, group
`anthropic-browser`), driven through the SDK's own pipeline: a thin driver of the SDK's
`BetaAbstractBrowserToolset20260801` whose `execute` forwards `(name, input)` to boxd through the real client and
whose `_browser_state` is the last answer's. Every member runs through `call` against loopback pages this test
serves, and what the SDK hands the model is checked; then one call over MCP."""
import asyncio
import base64
import json
import shutil

import pytest
from anthropic.lib.tools._toolsets._errors import (
    InvalidMemberInputError,
    TabMissingError,
    UnknownMemberError,
)
from anthropic.tools import ToolError
from anthropic.tools.browser import (
    BetaAbstractBrowserToolset20260801,
    BetaBrowserNavigateResult,
    BetaBrowserState,
    BetaLocalFilePolicy,
    BetaScreenshotResult,
    BetaToolsetCallContext,
)
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from browser_support import Pages, browser_boxd, serving
from conftest import TOKEN

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed")

ARTICLE = "A long article about the toolset. " * 12

MAIN = f"""<!doctype html><html><head><title>Toolset</title></head><body style="margin:0">
<h1>Toolset page</h1>
<article><p>{ARTICLE}</p></article>
<button id="go" style="position:absolute;left:20px;top:200px;width:120px;height:40px">Go</button>
<div id="out"></div>
<input id="name" aria-label="Name" style="position:absolute;left:20px;top:260px">
<select id="color" aria-label="Color"><option value="r">Red</option><option value="g">Green</option></select>
<input id="agree" type="checkbox" aria-label="Agree">
<input id="file" type="file" aria-label="Attachment">
<div id="pad" style="height:3000px"></div>
<a id="far" href="/second">Far link</a>
<script>
  window.seen = [];
  const note = e => window.seen.push(e.type + ':' + e.button + ':' + e.detail + ':' + e.shiftKey);
  for (const kind of ['click', 'auxclick', 'contextmenu', 'dblclick', 'mousedown', 'mouseup'])
    document.getElementById('go').addEventListener(kind, note);
  document.getElementById('go').addEventListener('mouseenter', () => window.seen.push('enter'));
  document.getElementById('go').addEventListener('click', () => {{
    document.getElementById('out').textContent = 'clicked ' + window.seen.filter(s => s.startsWith('click')).length;
  }});
  window.keys = [];
  document.addEventListener('keydown', e => window.keys.push(e.key + (e.ctrlKey ? '+ctrl' : '')));
  window.moves = 0;
  document.addEventListener('mousemove', e => {{ window.moves++; window.lastMove = [e.clientX, e.clientY, e.buttons]; }});
  console.log('hello from the page');
  fetch('/data.json');
</script></body></html>"""

PAGES = {
    "/": MAIN,
    "/second": "<!doctype html><title>Second</title><p>second page</p>",
    "/alert": "<!doctype html><title>Alerting</title><script>alert('hi there')</script>",
    "/popup": "<!doctype html><title>Opener</title><a href='/second' target='_blank'>Open</a>",
}


class Handler(Pages):
    def do_GET(self):
        path = self.path.partition("?")[0]
        if path == "/data.json":
            return self.answer(b'{"answer": 42}', "application/json")
        if path == "/report.csv":
            return self.answer(b"name,value\nanswer,42\n", "text/csv",
                               {"Content-Disposition": 'attachment; filename="report.csv"'})
        page = PAGES.get(path)
        if page is None:
            self.send_error(404)
            return
        self.answer(page.encode(), "text/html; charset=utf-8")


@pytest.fixture(scope="module")
def site():
    with serving(Handler) as url:
        yield url


@pytest.fixture
def boxd(tmp_path):
    # Uploads come from a directory of their own (the SDK keeps it apart from where downloads land).
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    server = browser_boxd(tmp_path, "--allow-dir", str(uploads))
    server.uploads = uploads
    yield server
    server.stop()


class BoxdBrowser(BetaAbstractBrowserToolset20260801):
    """The driver: every member goes to boxd's `browser_toolset` tool as it is; its answer's `result` is the
    member's return value and its `browser_state` what `_browser_state` reports."""

    RESULTS = {
        "navigate": lambda result: BetaBrowserNavigateResult(**result),
        "screenshot": lambda result: BetaScreenshotResult(**result),
        "zoom": lambda result: BetaScreenshotResult(**result),
    }

    def __init__(self, call_tool, **options):
        super().__init__(**options)
        self.call_tool = call_tool
        self.state = BetaBrowserState(tabs=[])

    def execute(self, context, name, input):
        answer = self.call_tool("browser_toolset", {"member": name, "input": input.to_dict()})
        structured = answer["structuredContent"]
        self.state = BetaBrowserState(**structured["browser_state"])
        if answer["isError"]:
            raise ToolError(structured["error"])
        return self.RESULTS.get(name, lambda result: result)(structured["result"])

    def _browser_state(self, context):
        return self.state


@pytest.fixture
def client(boxd):
    with boxd.client() as client:
        yield client


@pytest.fixture
def toolset(client, boxd):
    return BoxdBrowser(
        client.call_tool,
        configs={name: {"enabled": True} for name in ("file_upload", "read_console", "read_network", "javascript_exec")},
        confirm=lambda context: True,
        file_policy=BetaLocalFilePolicy(upload_roots=[boxd.uploads], download_dir=boxd.workspace,
                                        expose_download_paths=True),
    )


CONTEXT = BetaToolsetCallContext()


def run(toolset, name, **input):
    """What the SDK hands the model for one member call: its content blocks, the browser_state block last."""
    content = toolset.call(CONTEXT, name, input)
    assert content[-1]["type"] == "browser_state", content
    return content


def texts(content):
    return [block["text"] for block in content if block["type"] == "text"]


def refused(toolset, name, **input):
    with pytest.raises(ToolError) as raised:
        toolset.call(CONTEXT, name, input)
    content = raised.value.content
    return content if isinstance(content, str) else "\n".join(block["text"] for block in content)


def js(toolset, code):
    """The value of a page expression, through javascript_exec (as JSON, so a string stays one)."""
    [text] = texts(run(toolset, "javascript_exec", text=f"JSON.stringify(({code}))"))
    return None if text == "undefined" else json.loads(text)


def box(toolset, element):
    """The centre of an element, in viewport pixels."""
    rect = js(toolset, f"document.getElementById('{element}').getBoundingClientRect()")
    return {"type": "coordinate", "x": int(rect["x"] + rect["width"] / 2), "y": int(rect["y"] + rect["height"] / 2)}


def ref_of(text, role, name):
    for line in text.splitlines():
        if line.strip().startswith(f'- {role} "{name}"') and "[ref_" in line:
            return line.split("[ref_", 1)[1].split("]", 1)[0]
    raise AssertionError(f"no {role} {name!r} in:\n{text}")


def test_navigation_capture_and_tabs(toolset, site):
    content = run(toolset, "navigate", url=f"{site}/")
    assert texts(content) == [f"Navigated to {site}/ — Toolset (HTTP 200)"]
    state = content[-1]
    [tab] = state["tabs"]
    assert tab == {"tab_id": tab["tab_id"], "title": "Toolset", "url": f"{site}/", "active": True}
    assert "state_changes" not in state

    [image, _] = run(toolset, "screenshot")
    assert image["type"] == "image" and image["source"]["media_type"] == "image/png"
    png = base64.b64decode(image["source"]["data"])
    assert png.startswith(b"\x89PNG") and int.from_bytes(png[16:20], "big") > 100

    [zoomed, _] = run(toolset, "zoom", region=[0, 0, 100, 50])
    zoomed_png = base64.b64decode(zoomed["source"]["data"])
    assert int.from_bytes(zoomed_png[16:20], "big") > 100  # scaled up from 100 pixels wide
    assert "not within the viewport" in refused(toolset, "zoom", region=[0, 0, 100000, 50])
    assert "four numbers" in refused(toolset, "zoom", region=[0, 0, 10])

    assert texts(run(toolset, "navigate", url=f"{site}/second")) == [f"Navigated to {site}/second — Second (HTTP 200)"]
    assert texts(run(toolset, "navigate", url="back"))[0].startswith(f"Navigated to {site}/ — Toolset")
    assert texts(run(toolset, "navigate", url="FORWARD"))[0].startswith(f"Navigated to {site}/second")
    assert texts(run(toolset, "navigate", url="reload"))[0].startswith(f"Navigated to {site}/second")
    # No protocol: https:// (nothing listens there, so the navigation fails, saying where it went).
    assert "https://127.0.0.1:1/" in refused(toolset, "navigate", url="127.0.0.1:1/")

    first = tab["tab_id"]
    [state] = run(toolset, "new_tab")  # a tab member's result is the browser_state block alone
    second = next(entry["tab_id"] for entry in state["tabs"] if entry["tab_id"] != first)
    assert [entry["active"] for entry in state["tabs"]] == [False, True]
    assert state["state_changes"] == [{"type": "tab_opened", "tab_id": second}]
    assert toolset.state.tabs[1]["url"] in ("about:blank", "")

    [state] = run(toolset, "list_tabs")
    assert [entry["tab_id"] for entry in state["tabs"]] == [first, second]
    # A call addressed to a background tab acts there and leaves the active tab active.
    run(toolset, "navigate", url=f"{site}/", tab_id=first)
    [state] = run(toolset, "list_tabs")
    assert [(entry["title"], entry["active"]) for entry in state["tabs"]] == [("Toolset", False), ("", True)]
    [state] = run(toolset, "switch_tab", tab_id=first)
    assert [entry["active"] for entry in state["tabs"]] == [True, False]
    content = run(toolset, "close_tab", tab_id=second)
    assert [entry["tab_id"] for entry in content[-1]["tabs"]] == [first]
    assert refused(toolset, "switch_tab", tab_id=second) == TabMissingError().content
    assert refused(toolset, "screenshot", tab_id="tab_999") == TabMissingError().content

    # A tab the page opens is reported once, as opened.
    run(toolset, "navigate", url=f"{site}/popup")
    text = texts(run(toolset, "find", query="Open link"))[0]
    content = run(toolset, "left_click", target={"type": "ref", "ref": f"ref_{ref_of(text, 'link', 'Open')}"})
    for _ in range(20):  # the browser opens the tab a moment after the click
        if len(content[-1]["tabs"]) == 2:
            break
        content = run(toolset, "wait", duration=0.1)
    assert [change["type"] for change in content[-1].get("state_changes", [])] == ["tab_opened"], content
    assert len(content[-1]["tabs"]) == 2


def test_pointer_and_keyboard(toolset, site):
    run(toolset, "navigate", url=f"{site}/")
    go = box(toolset, "go")
    assert texts(run(toolset, "left_click", target=go)) == ["Clicked."]
    assert js(toolset, "document.getElementById('out').textContent") == "clicked 1"

    page = texts(run(toolset, "read_page", filter="interactive"))[0]
    go_ref = ref_of(page, "button", "Go")
    assert texts(run(toolset, "left_click", target={"type": "ref", "ref": f"ref_{go_ref}"}, modifiers="shift")) == [
        "Clicked."]
    assert js(toolset, "window.seen.filter(s => s.startsWith('click')).pop()") == "click:0:1:true"
    assert texts(run(toolset, "right_click", target=go)) == ["Right-clicked."]
    assert texts(run(toolset, "middle_click", target=go)) == ["Middle-clicked."]
    assert texts(run(toolset, "double_click", target=go)) == ["Double-clicked."]
    assert texts(run(toolset, "triple_click", target=go)) == ["Triple-clicked."]
    seen = js(toolset, "window.seen")
    assert "contextmenu:2:0:false" in seen or any(s.startswith("contextmenu:2") for s in seen)
    assert any(s.startswith("auxclick:1") for s in seen)
    assert "dblclick:0:2:false" in seen
    assert any(s.startswith("click:0:3") for s in seen)

    js(toolset, "window.seen = []")
    assert texts(run(toolset, "hover", target=go)) == ["Hovered."]
    assert texts(run(toolset, "mouse_move", target={"type": "coordinate", "x": 5, "y": 6})) == ["Moved the mouse."]
    assert js(toolset, "window.lastMove") == [5, 6, 0]
    assert texts(run(toolset, "left_mouse_down", target=go)) == ["Mouse button pressed."]
    run(toolset, "mouse_move", target={"type": "coordinate", "x": 7, "y": 8})
    assert js(toolset, "window.lastMove") == [7, 8, 1]
    assert texts(run(toolset, "left_mouse_up", target={"type": "coordinate", "x": 7, "y": 8})) == [
        "Mouse button released."]
    assert js(toolset, "window.seen.filter(s => s.startsWith('mouse'))")[:1] == ["mousedown:0:1:false"]
    assert texts(run(toolset, "left_click_drag", **{"from": go, "target": {"type": "coordinate", "x": 9, "y": 9}})) == [
        "Dragged."]
    assert js(toolset, "window.lastMove")[:2] == [9, 9]
    assert "outside the viewport" in refused(toolset, "left_click", target={"type": "coordinate", "x": -1, "y": 5})

    assert texts(run(toolset, "scroll", scroll_direction="down", target=go, scroll_amount=5)) == ["Scrolled down."]
    assert js(toolset, "window.scrollY") > 0
    assert "from 1 to 10" in refused(toolset, "scroll", scroll_direction="up", target=go, scroll_amount=11)
    far = ref_of(texts(run(toolset, "find", query="far link"))[0], "link", "Far link")
    assert texts(run(toolset, "scroll_to", target={"type": "ref", "ref": f"ref_{far}"})) == [f"Scrolled to ref_{far}."]
    assert js(toolset, "window.scrollY") > 2000

    name = ref_of(page, "textbox", "Name")
    run(toolset, "left_click", target={"type": "ref", "ref": f"ref_{name}"})
    assert texts(run(toolset, "type", text="hello")) == ["Typed."]
    assert js(toolset, "document.getElementById('name').value") == "hello"
    assert texts(run(toolset, "key", text="ctrl+a BackSpace")) == ["Pressed ctrl+a BackSpace."]
    assert js(toolset, "document.getElementById('name').value") == ""
    assert texts(run(toolset, "key", text="x", repeat=3)) == ["Pressed x."]
    assert js(toolset, "document.getElementById('name').value") == "xxx"
    assert texts(run(toolset, "hold_key", text="shift", duration=0.2)) == ["Held shift for 0.2s."]
    assert "Shift" in js(toolset, "window.keys")
    assert "from 0 to 30" in refused(toolset, "hold_key", text="a", duration=31)
    assert texts(run(toolset, "wait", duration=0.1)) == ["Waited 0.1s."]
    assert texts(run(toolset, "wait", duration=1)) == ["Waited 1s."]


def test_forms_reading_and_scripts(toolset, site, boxd):
    run(toolset, "navigate", url=f"{site}/")
    page = texts(run(toolset, "read_page"))[0]
    assert '- heading "Toolset page"' in page and "[ref_" in page
    interactive = texts(run(toolset, "read_page", filter="interactive"))[0]
    assert all("[ref_" in line for line in interactive.splitlines())
    assert "heading" not in interactive
    shallow = texts(run(toolset, "read_page", depth=1))[0]
    assert all(not line.startswith(" ") for line in shallow.splitlines())
    # The far link is below the viewport: only the whole page ("all") shows it.
    assert "Far link" not in page
    assert "Far link" in texts(run(toolset, "read_page", filter="all"))[0]
    color = ref_of(interactive, "combobox", "Color")
    subtree = texts(run(toolset, "read_page", ref=f"ref_{color}", filter="all"))[0]
    assert subtree.startswith('- combobox "Color"') and "Green" in subtree
    assert "refs look like ref_7" in refused(toolset, "read_page", ref="e3")

    found = texts(run(toolset, "find", query="name field"))[0]
    assert found.splitlines()[0].startswith('- textbox "Name"')
    assert len(found.splitlines()) <= 20

    agree = ref_of(interactive, "checkbox", "Agree")
    name = ref_of(interactive, "textbox", "Name")
    assert texts(run(toolset, "form_input", target={"type": "ref", "ref": f"ref_{color}"}, value="Green")) == [
        f"Set the value of ref_{color}."]
    run(toolset, "form_input", target={"type": "ref", "ref": f"ref_{agree}"}, value=True)
    run(toolset, "form_input", target={"type": "ref", "ref": f"ref_{name}"}, value=42)
    assert js(toolset, "[color.value, agree.checked, document.getElementById('name').value]") == ["g", True, "42"]
    assert "takes true or false" in refused(toolset, "form_input", target={"type": "ref", "ref": f"ref_{agree}"},
                                            value="yes")
    assert "not found in the current page" in refused(toolset, "form_input",
                                                      target={"type": "ref", "ref": "ref_99999"}, value="x")

    text = texts(run(toolset, "get_page_text"))[0]
    assert text.startswith("A long article about the toolset.") and "Go" not in text

    console = texts(run(toolset, "read_console"))[0]
    assert console == "[LOG] hello from the page"
    assert texts(run(toolset, "read_console")) == ["(empty)"]  # since the last read
    network = texts(run(toolset, "read_network"))[0]
    assert f"GET {site}/data.json 200 application/json" in network
    assert texts(run(toolset, "read_network")) == ["(empty)"]

    assert js(toolset, "6 * 7") == 42
    assert texts(run(toolset, "javascript_exec", text="document.title")) == ["Toolset"]
    assert texts(run(toolset, "javascript_exec", text="new Promise(r => setTimeout(() => r('later'), 50))")) == ["later"]
    assert "The script threw: Error: boom" in refused(toolset, "javascript_exec", text="throw new Error('boom')")

    upload = boxd.uploads / "notes.txt"
    upload.write_text("uploaded text")
    attachment = ref_of(interactive, "button", "Attachment") if '- button "Attachment"' in interactive else None
    if attachment is None:
        attachment = next(line.split("[ref_", 1)[1].split("]", 1)[0] for line in interactive.splitlines()
                          if "Attachment" in line)
    target = {"type": "ref", "ref": f"ref_{attachment}"}
    assert texts(run(toolset, "file_upload", target=target, paths=[str(upload)])) == ["Uploaded."]
    assert js(toolset, "document.getElementById('file').files[0].name") == "notes.txt"
    # The SDK's file policy refuses a path outside its roots before boxd sees it.
    assert refused(toolset, "file_upload", target=target, paths=["/etc/passwd"]) == (
        "file_upload path is outside the configured upload roots")
    assert "not a file input" in refused(toolset, "file_upload", target={"type": "ref", "ref": f"ref_{name}"},
                                         paths=[str(upload)])


def test_dialogs_and_downloads_are_state_changes(toolset, site, boxd):
    content = run(toolset, "navigate", url=f"{site}/alert")
    # The SDK reads a dismissed dialog as a line of text before the block.
    assert 'An alert dialog "hi there" was dismissed.' in texts(content)
    assert "state_changes" not in content[-1]

    run(toolset, "navigate", url=f"{site}/")
    content = run(toolset, "javascript_exec", text=f"location.href = '{site}/report.csv'; 1")
    changes = content[-1].get("state_changes", [])
    for _ in range(20):
        if any(change["type"] == "download_completed" for change in changes):
            break
        changes = run(toolset, "wait", duration=0.2)[-1].get("state_changes", [])
    completed = [change for change in changes if change["type"] == "download_completed"]
    assert completed, changes
    assert completed[0]["url"] == f"{site}/report.csv"
    assert completed[0]["path"] == str(boxd.workspace / "report.csv")
    assert (boxd.workspace / "report.csv").read_text() == "name,value\nanswer,42\n"


def test_refusals_are_worded_as_the_sdk_words_them(client, site):
    def answer(member, input):
        result = client.call_tool("browser_toolset", {"member": member, "input": input})
        assert result["isError"] is True, result
        return result["content"][0]["text"], result["structuredContent"]

    text, structured = answer("nope", {})
    assert text == UnknownMemberError("nope", family="browser").content
    assert structured["browser_state"] == {"tabs": []}  # no browser was started for it
    text, _ = answer("navigate", {})
    assert text == InvalidMemberInputError("navigate", "url: Field required", family="browser").content
    text, _ = answer("scroll", {"scroll_direction": "sideways", "target": {"type": "coordinate", "x": 1, "y": 1}})
    assert text.startswith("invalid input for browser member 'scroll': ")


def test_one_call_over_mcp(boxd, site):
    async def call():
        url = f"http://127.0.0.1:{boxd.port}/mcp"
        async with streamablehttp_client(url, headers={"Authorization": f"Bearer {TOKEN}"}) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = {tool.name: tool for tool in (await session.list_tools()).tools}
                assert "browser_toolset" in tools
                return await session.call_tool("browser_toolset",
                                               {"member": "navigate", "input": {"url": f"{site}/second"}})

    result = asyncio.run(call())
    assert result.isError is False
    assert result.content[0].text == f"Navigated to {site}/second — Second (HTTP 200)"
    assert result.structuredContent["result"] == {"url": f"{site}/second", "status": 200, "title": "Second"}
    [tab] = result.structuredContent["browser_state"]["tabs"]
    assert tab["active"] is True and tab["title"] == "Second"
