"""Sessions of the `browser` family (`browser_session_new` / `_list` / `_close`, and the `session` argument of
every browser tool): isolated browser contexts of the one Chromium, driven through the SDK's `BrowserSandbox`
bound to the real `SandboxHttpClient`, and once over MCP. Pages are served on loopback by the test."""
import asyncio
import json
import pathlib
import re
import shutil
import time

import pytest
import requests
from agentscope_runtime.sandbox.box.browser.browser_sandbox import BrowserSandbox
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from browser_support import Pages, kill_browser, browser_boxd, failed, ok, serving, structured, text
from conftest import TOKEN

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed")

PAGES = {
    "/": "<!doctype html><title>Home</title><p>home</p><button onclick=\"this.textContent='pressed'\">Press</button>",
    "/store": "<!doctype html><title>Store</title><script>"
              "document.cookie = 'who=' + location.search.slice(1) + '; path=/';"
              "localStorage.setItem('who', location.search.slice(1));</script><p>stored</p>",
    "/read": "<!doctype html><title>Read</title><p id=out></p><script>"
             "document.getElementById('out').textContent = 'cookie=[' + document.cookie + '] storage=[' + "
             "(localStorage.getItem('who') || '') + ']';</script>",
    "/attachment": None,
}
REPORT = b"name,value\nanswer,42\n"


class Handler(Pages):
    def do_GET(self):
        path = self.path.partition("?")[0]
        if path == "/attachment":
            return self.answer(REPORT, "text/csv", {"Content-Disposition": 'attachment; filename="report.csv"'})
        page = PAGES.get(path)
        if page is None:
            self.send_error(404)
            return
        self.answer(page.encode(), "text/html")


@pytest.fixture(scope="module")
def site():
    with serving(Handler) as url:
        yield url


@pytest.fixture
def boxd(tmp_path):
    server = browser_boxd(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def client(boxd):
    with boxd.client() as client:
        yield client


@pytest.fixture
def browser(client):
    sandbox = BrowserSandbox.__new__(BrowserSandbox)
    sandbox.call_tool = client.call_tool
    return sandbox


def new_session(client):
    result = client.call_tool("browser_session_new", {})
    said = ok(result)
    session = structured(result)["session"]
    assert re.fullmatch(r"s\d+", session), result
    assert session in said and '"session"' in said
    return session


def listed(client):
    result = client.call_tool("browser_session_list", {})
    ok(result)
    return {entry["session"]: entry for entry in structured(result)["sessions"]}


def footprint(boxd):
    return requests.get(f"http://127.0.0.1:{boxd.port}/memory",
                        headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30).json()["families"]["browser"]


def browser_processes(boxd, expected, seconds=15):
    """The browser's process count once it is `expected` (bounded polling; the last count otherwise)."""
    deadline = time.monotonic() + seconds
    count = footprint(boxd)["processes"]
    while count != expected and time.monotonic() < deadline:
        time.sleep(0.2)
        count = footprint(boxd)["processes"]
    return count


def test_cookies_and_storage_are_per_session(browser, client, site):
    ok(browser.browser_navigate(f"{site}/store?default"))
    first = new_session(client)
    second = new_session(client)
    assert first != second
    ok(client.call_tool("browser_navigate", {"url": f"{site}/store?first", "session": first}))
    # Each session reads only what it stored itself; the default session keeps its own.
    read = lambda session: ok(client.call_tool(
        "browser_navigate", {"url": f"{site}/read", **({"session": session} if session else {})}))
    assert "cookie=[who=first] storage=[first]" in read(first)
    assert "cookie=[] storage=[]" in read(second)
    assert "cookie=[who=default] storage=[default]" in read(None)
    # Upstream's call, without the argument, is the default session's; so is the SDK's way of leaving it out.
    assert "cookie=[who=default] storage=[default]" in ok(browser.browser_navigate(f"{site}/read"))
    for left_out in ("", None):
        said = ok(client.call_tool("browser_navigate", {"url": f"{site}/read", "session": left_out}))
        assert "cookie=[who=default] storage=[default]" in said


def test_tabs_and_refs_are_per_session(browser, client, site):
    ok(browser.browser_navigate(f"{site}/"))
    session = new_session(client)
    page = ok(client.call_tool("browser_navigate", {"url": f"{site}/", "session": session}))
    ours = re.search(rf'button "Press" \[ref=({session}_e\d+)\]', page)
    assert ours, page
    ok(client.call_tool("browser_tab_new", {"url": f"{site}/read", "session": session}))
    # The session has two tabs; the default session still has one (no tab list in its answers).
    tabs = ok(client.call_tool("browser_tab_list", {"session": session}))
    assert tabs.count("\n- ") == 2 and tabs.startswith("### Open tabs"), tabs
    assert ok(browser.browser_tab_list()).count("\n- ") == 1
    sessions = listed(client)
    assert sessions[session]["tabs"] == 2 and sessions[session]["current_url"] == f"{site}/read"
    assert sessions["default"]["tabs"] == 1 and sessions["default"]["current_url"] == f"{site}/"
    # A ref of the session, used in the default session, fails loudly (it would name another element).
    default_page = ok(browser.browser_snapshot())
    default_ref = re.search(r'button "Press" \[ref=(e\d+)\]', default_page).group(1)
    refused = failed(browser.browser_click("Press", ours.group(1)))
    assert f"Ref {ours.group(1)} is from session {session}" in refused and "default" in refused
    # ... and a default ref in the session.
    refused = failed(client.call_tool("browser_click", {"element": "Press", "ref": default_ref, "session": session}))
    assert f"Ref {default_ref} is from session default" in refused
    # Each acts in its own session.
    ok(client.call_tool("browser_tab_select", {"index": 1, "session": session}))
    pressed = ok(client.call_tool("browser_click", {"element": "Press", "ref": ours.group(1), "session": session}))
    assert '"pressed"' in pressed
    assert '"Press"' in ok(browser.browser_snapshot())


def test_close_frees_the_session(browser, client, site, boxd):
    ok(browser.browser_navigate(f"{site}/"))
    before = browser_processes(boxd, None, seconds=0)
    session = new_session(client)
    ok(client.call_tool("browser_navigate", {"url": f"{site}/read", "session": session}))
    ok(client.call_tool("browser_tab_new", {"url": f"{site}/", "session": session}))
    # The session's pages run in renderers of their own (no two browser contexts share one).
    assert browser_processes(boxd, None, seconds=0) > before
    said = ok(client.call_tool("browser_session_close", {"session": session}))
    assert f"Closed session {session}" in said and "default" in said
    assert set(listed(client)) == {"default"}
    # Its pages are gone from Chromium, and their renderers with them.
    assert browser_processes(boxd, before) == before
    assert ok(browser.browser_tab_list()).count("\n- ") == 1
    state = json.loads(ok(client.call_tool("browser_toolset", {"member": "list_tabs", "input": {}}))
                       .rpartition("browser_state: ")[2])
    assert [tab["url"] for tab in state["tabs"]] == [f"{site}/"]
    # The closed id is refused, and never handed out again.
    refused = failed(client.call_tool("browser_navigate", {"url": f"{site}/", "session": session}))
    assert f'Unknown session "{session}"' in refused and "default" in refused
    assert new_session(client) != session


def test_refusals_name_what_is_wrong(browser, client, site):
    refused = failed(client.call_tool("browser_session_close", {"session": "default"}))
    assert "default session cannot be closed" in refused
    refused = failed(client.call_tool("browser_snapshot", {"session": "s99"}))
    assert 'Unknown session "s99"' in refused and "the open sessions are default" in refused
    refused = failed(client.call_tool("browser_session_close", {"session": "nope"}))
    assert 'Unknown session "nope"' in refused
    session = new_session(client)
    refused = failed(client.call_tool("browser_session_close", {"session": "s99"}))
    assert f"the open sessions are default, {session}" in refused
    # The missing argument is zod's problem, as for every tool of the group.
    missing = failed(client.call_tool("browser_session_close", {}))
    assert '"session"' in missing and '"Required"' in missing


def test_the_session_cap_is_an_error(client, site):
    opened = [new_session(client) for _ in range(16)]
    assert len(set(opened)) == 16
    refused = failed(client.call_tool("browser_session_new", {}))
    assert "At most 16 sessions" in refused and "browser_session_close" in refused
    ok(client.call_tool("browser_session_close", {"session": opened[0]}))
    assert new_session(client) not in opened


def test_a_session_s_downloads_land_in_the_workspace(client, boxd, site):
    session = new_session(client)
    said = ok(client.call_tool("browser_navigate", {"url": f"{site}/attachment", "session": session}))
    assert "Downloaded file report.csv" in said, said
    assert (boxd.workspace / "report.csv").read_bytes() == REPORT
    # Chromium wrote it in the session's own directory of the profile, which goes with the session.
    staging = list(pathlib.Path("/tmp").glob(f"boxd-browser-{boxd.proc.pid}-*/downloads-{session}"))
    assert len(staging) == 1, staging
    ok(client.call_tool("browser_session_close", {"session": session}))
    assert not staging[0].exists()


def test_the_toolset_acts_in_a_session_with_refs_of_its_own(client, site):
    def member(name, input, session=None):
        arguments = {"member": name, "input": input, **({"session": session} if session else {})}
        return client.call_tool("browser_toolset", arguments)

    ok(member("navigate", {"url": f"{site}/"}))
    session = new_session(client)
    ok(member("navigate", {"url": f"{site}/"}, session))
    page = ok(member("read_page", {"filter": "interactive"}, session))
    button = re.search(rf'button "Press" \[({session}_ref_\d+)\]', page)
    assert button, page
    # The default session's refs are the SDK's own form, and refused in the session.
    default_ref = re.search(r'button "Press" \[(ref_\d+)\]', ok(member("read_page", {"filter": "interactive"})))
    assert default_ref
    refused = failed(member("left_click", {"target": {"type": "ref", "ref": default_ref.group(1)}}, session))
    assert "is from session default" in refused
    ok(member("left_click", {"target": {"type": "ref", "ref": button.group(1)}}, session))
    assert '"pressed"' in ok(member("read_page", {"filter": "all"}, session))
    assert '"Press"' in ok(member("read_page", {"filter": "all"}))
    # Each session's browser_state lists its own tabs.
    state = json.loads(ok(member("list_tabs", {}, session)).rpartition("browser_state: ")[2])
    assert [tab["url"] for tab in state["tabs"]] == [f"{site}/"]


def test_browser_close_and_a_dead_browser_take_the_sessions_along(client, boxd, site):
    session = new_session(client)
    ok(client.call_tool("browser_navigate", {"url": f"{site}/", "session": session}))
    said = ok(client.call_tool("browser_close", {}))
    assert f"The sessions {session} were closed with it" in said
    assert set(listed(client)) == {"default"}
    refused = failed(client.call_tool("browser_snapshot", {"session": session}))
    assert f'Unknown session "{session}"' in refused
    # Killed: the next call starts a new browser and says the sessions went with the old one.
    second = new_session(client)
    assert kill_browser(boxd) > 0
    answer = ok(client.call_tool("browser_navigate", {"url": f"{site}/"}))
    assert "The browser had exited" in answer and f"The sessions {second} were closed with it" in answer
    assert set(listed(client)) == {"default"}


def test_in_a_session_browser_close_closes_its_tabs_only(client, site):
    ok(client.call_tool("browser_navigate", {"url": f"{site}/"}))
    session = new_session(client)
    said = ok(client.call_tool("browser_close", {"session": session}))
    assert f"Closed the 1 tab(s) of session {session}" in said
    sessions = listed(client)
    assert sessions[session]["tabs"] == 0 and sessions["default"]["tabs"] == 1
    # Its next call opens a blank tab in it.
    assert "- Page URL: about:blank" in ok(client.call_tool("browser_snapshot", {"session": session}))


def browser_pss(boxd):
    return footprint(boxd)["pss_bytes"]


def settled_pss(boxd):
    """The browser's PSS once two readings 0.5 s apart agree within 2 % (at most 10 readings)."""
    last = browser_pss(boxd)
    for _ in range(10):
        time.sleep(0.5)
        now = browser_pss(boxd)
        if abs(now - last) <= 0.02 * last:
            return now
        last = now
    return last


def test_eight_sessions_cost_far_less_than_eight_browsers(client, boxd, site, capsys):
    ok(client.call_tool("browser_navigate", {"url": f"{site}/read"}))
    one = settled_pss(boxd)
    sessions = [new_session(client) for _ in range(7)]
    for session in sessions:
        ok(client.call_tool("browser_navigate", {"url": f"{site}/read", "session": session}))
    eight = settled_pss(boxd)
    for session in sessions:
        ok(client.call_tool("browser_session_close", {"session": session}))
    after = settled_pss(boxd)
    with capsys.disabled():
        print(f"\nbrowser PSS: 1 session {one / 2**20:.1f} MiB, 8 sessions {eight / 2**20:.1f} MiB "
              f"(+{(eight - one) / 7 / 2**20:.1f} MiB each), after closing 7: {after / 2**20:.1f} MiB")
    # Eight browsers would be eight times one; eight sessions are one browser and seven more renderers.
    assert eight < 4 * one
    assert after < eight


def test_over_mcp_the_schemas_have_the_session_and_a_call_takes_it(boxd, site):
    async def run():
        url = f"http://127.0.0.1:{boxd.port}/mcp"
        async with streamablehttp_client(url, headers={"Authorization": f"Bearer {TOKEN}"}) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = {tool.name: tool for tool in (await session.list_tools()).tools}
                opened = await session.call_tool("browser_session_new", {})
                name = opened.structuredContent["session"]
                navigated = await session.call_tool("browser_navigate", {"url": f"{site}/", "session": name})
                sessions = await session.call_tool("browser_session_list", {})
                return tools, name, navigated, sessions

    tools, name, navigated, sessions = asyncio.run(run())
    for tool in tools.values():
        if tool.name.startswith("browser_") and tool.name not in ("browser_session_new", "browser_session_list",
                                                                   "browser_session_close"):
            assert tool.inputSchema["properties"]["session"]["type"] == "string", tool.name
            assert "session" not in tool.inputSchema.get("required", []), tool.name
    assert tools["browser_session_close"].inputSchema["required"] == ["session"]
    assert navigated.isError is False and "- Page Title: Home" in navigated.content[0].text
    entries = {entry["session"]: entry for entry in sessions.structuredContent["sessions"]}
    assert entries[name] == {"session": name, "tabs": 1, "current_url": f"{site}/"}
    # The default session holds what the browser opened at its start (a blank page, or nothing).
    assert entries["default"]["tabs"] <= 1 and entries["default"]["current_url"] in (None, "about:blank")
