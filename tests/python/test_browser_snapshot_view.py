"""`browser_snapshot`'s own arguments (a part of the page, within a size, or its changes) through the
real clients: the SDK's `SandboxHttpClient.call_tool` (its `BrowserSandbox.browser_snapshot` takes no
arguments) and the Python `mcp` client over /mcp, on headless Debian Chromium, against pages the test
writes and serves."""
import asyncio
import functools
import re
import shutil
import time

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

from browser_support import Pages, browser_boxd, failed, ok, serving, text
from conftest import TOKEN

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed")

ROWS = 1000


def big_page():
    """10 000 elements: 1 000 rows of ten (a wrapper, a heading, a paragraph with a span, a link, a
    button, a field, a list of two items); a click on a button says which."""
    rows = "".join(
        f'<div class="row"><h3>Row {n}</h3><p>Some text for row {n} <span>detail {n}</span></p>'
        f'<a href="#row-{n}">Link {n}</a><button data-n="{n}">Button {n}</button>'
        f'<input aria-label="Field {n}"><ul><li>first {n}</li><li>second {n}</li></ul></div>'
        for n in range(ROWS)
    )
    return (
        "<!doctype html><html><head><title>Big</title></head><body>"
        '<p id="out">Nothing clicked</p>'
        f"{rows}"
        "<script>document.addEventListener('click', (event) => {"
        " const n = event.target.dataset.n;"
        " if (n !== undefined) document.getElementById('out').textContent = 'Clicked ' + n; });"
        "</script></body></html>"
    )


LIST_PAGE = """<!doctype html><html><head><title>List</title></head><body>
<main><h1>Todo</h1>
<ul id="list"><li>One</li><li>Two</li></ul>
<button onclick="add()">Add</button>
<button id="save" onclick="this.disabled = true">Save</button>
<section aria-label="Deep"><div><article aria-label="Inner"><p>Deep text</p>
<button onclick="document.title = 'Deep clicked'">Deep button</button></article></div></section>
</main>
<script>
let added = 0;
function add() {
  added += 1;
  const item = document.createElement('li');
  const button = document.createElement('button');
  button.textContent = 'New ' + added;
  button.onclick = () => { document.getElementById('save').textContent = 'Saved ' + button.textContent; };
  item.appendChild(button);
  document.getElementById('list').appendChild(item);
}
</script></body></html>"""

TALL_PAGE = """<!doctype html><html><head><title>Tall</title></head><body style="margin:0">
<button style="height:40px" onclick="window.scrollTo(0, 5000)">Top button</button>
<div style="height:5000px"></div>
<button id="bottom" style="height:40px">Bottom button</button>
</body></html>"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("pages")
    (root / "big.html").write_text(big_page())
    (root / "list.html").write_text(LIST_PAGE)
    (root / "tall.html").write_text(TALL_PAGE)
    with serving(functools.partial(Pages, directory=str(root))) as url:
        yield url


@pytest.fixture
def boxd(tmp_path):
    server = browser_boxd(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def call(boxd):
    with boxd.client() as client:
        yield client.call_tool


def ref(answer, role, name):
    match = re.search(rf'- {role} "{re.escape(name)}"[^\n]*\[ref=(e\d+)\]', answer)
    assert match, f"no {role} {name!r} in:\n{answer}"
    return match.group(1)


def block(answer):
    """The fenced snapshot (or diff) of an answer."""
    match = re.search(r"```(?:yaml|diff)\n(.*?)\n```", answer, re.S)
    assert match, answer
    return match.group(1)


def test_an_interactive_budgeted_snapshot_of_10_000_elements_is_small_fast_and_its_refs_act(call, site):
    whole = ok(call("browser_navigate", {"url": f"{site}/big.html"}))
    # Upstream's call: the whole page, cut at 50 000 characters with upstream's notice.
    assert "- Snapshot cut:" in whole and "navigate to a narrower page" in whole
    timings = []
    for _ in range(3):
        started = time.monotonic()
        answer = ok(call("browser_snapshot", {"interactive": True, "max_tokens": 2000}))
        timings.append(time.monotonic() - started)
    print(f"interactive, 2 000 tokens: {min(timings) * 1000:.0f} ms best of 3")
    assert min(timings) < 2.0, timings
    yaml = block(answer)
    assert len(yaml) <= 8000
    # Only what can be acted on: no text, no headings, no list items.
    assert "Some text" not in yaml and "heading" not in yaml and "listitem" not in yaml
    assert '- button "Button 0"' in yaml and '- textbox "Field 0"' in yaml and '- link "Link 0"' in yaml
    # What was cut is said: at least how much (the page is read only as far as the view needs), and
    # the refs to pass as root to read it.
    note = re.search(r"- Snapshot cut: (\d+) lines shown \(the first 8000 characters\); more are not shown "
                     r"\(at least (\d+) lines with (\d+) elements: the page was read only as far as this view "
                     r"needed\)\. They are under ((?:e\d+, )*e\d+) and more \(pass one as root", answer)
    assert note, answer
    shown, cut, elements = (int(note.group(n)) for n in (1, 2, 3))
    assert shown == yaml.count("\n") + 1 and cut >= elements >= 12
    rest = note.group(4).split(", ")
    # A ref named for the rest reads it; its refs act.
    late = None
    for named in rest:
        part = ok(call("browser_snapshot", {"root": named, "interactive": True}))
        assert f"[ref={named}]" in block(part)
        late = late or re.search(r'- button "Button (\d+)" \[ref=(e\d+)\]', block(part))
    assert late and int(late.group(1)) > 0, rest
    clicked = ok(call("browser_click", {"element": "late button", "ref": late.group(2)}))
    assert f"Clicked {late.group(1)}" in clicked
    # A ref of the budgeted snapshot acts too.
    first = ref(yaml, "button", "Button 0")
    assert "Clicked 0" in ok(call("browser_click", {"element": "first button", "ref": first}))


def test_upstream_s_call_answers_as_before_and_new_arguments_are_checked(call, site):
    ok(call("browser_navigate", {"url": f"{site}/list.html"}))
    plain = ok(call("browser_snapshot", {}))
    assert plain == ok(call("browser_snapshot", {}))
    assert "Diff" not in plain and "cut" not in plain
    assert '- heading "Todo" [level=1]' in plain and re.search(r"- listitem [^\n]*\[ref=e\d+\]: One", plain), plain
    for bad, says in [({"depth": 0}, "depth must be a whole number"),
                      ({"max_tokens": 1.5}, "max_tokens must be a whole number"),
                      ({"root": "button"}, "refs look like e12"),
                      ({"root": "e99999"}, "not found"),
                      ({"interactive": "yes"}, "Expected boolean")]:
        assert says in failed(call("browser_snapshot", bad)), bad


def test_depth_and_root_narrow_the_snapshot_and_name_what_they_leave_out(call, site):
    page = ok(call("browser_navigate", {"url": f"{site}/list.html"}))
    deep = ref(page, "region", "Deep")
    shallow = ok(call("browser_snapshot", {"depth": 2}))
    yaml = block(shallow)
    assert "Deep button" not in yaml and '- region "Deep"' in yaml
    note = re.search(r"- Depth cut: (\d+) elements nested deeper than 2 levels are not shown; they are under "
                     r"([^(]*) \(pass one as root", shallow)
    assert note and deep in note.group(2).split(", "), shallow
    part = ok(call("browser_snapshot", {"root": deep}))
    assert block(part).startswith(f'- region "Deep" [ref={deep}]:')
    assert "Todo" not in block(part)
    button = ref(part, "button", "Deep button")
    assert "Deep clicked" in ok(call("browser_click", {"element": "deep", "ref": button}))


def test_a_diff_shows_what_changed_with_working_refs_and_says_when_nothing_did(call, site):
    page = ok(call("browser_navigate", {"url": f"{site}/list.html"}))
    add, save = ref(page, "button", "Add"), ref(page, "button", "Save")
    # The navigation's answer was the latest snapshot of the whole page: a diff compares with it.
    same = ok(call("browser_snapshot", {"diff": True}))
    assert "unchanged since this tab's previous snapshot of this view" in same and "```" not in same
    # Each view has its latest snapshot: the interactive one is compared with the interactive one.
    ok(call("browser_snapshot", {"interactive": True}))
    ok(call("browser_click", {"element": "Add", "ref": add}))
    ok(call("browser_click", {"element": "Add", "ref": add}))
    changes = ok(call("browser_snapshot", {"interactive": True, "diff": True}))
    assert "```diff" in changes and "(2 added, 0 removed, 0 changed;" in changes, changes
    diff = block(changes)
    assert re.search(r'^\+ - button "New 1" \[ref=e\d+\]$', diff, re.M), diff
    assert re.search(r'^\+ - button "New 2" \[ref=e\d+\]$', diff, re.M), diff
    assert "Add" not in diff
    # A ref from a diff acts.
    new = re.search(r'"New 2" \[ref=(e\d+)\]', diff).group(1)
    ok(call("browser_snapshot", {"depth": 10}))
    ok(call("browser_click", {"element": "New 2", "ref": new}))
    # An element written otherwise is one changed line, under the lines holding it.
    changed = ok(call("browser_snapshot", {"depth": 10, "diff": True}))
    assert "(0 added, 0 removed, 1 changed;" in changed, changed
    assert block(changed).split("\n") == [
        f"  - main [ref={re.search(r'- main .ref=(e[0-9]+)', page).group(1)}]:",
        f'-   - button "Save" [ref={save}]',
        f'+   - button "Saved New 2" [ref={save}]',
    ], changed
    # A navigation starts anew: no earlier snapshot of the view, the whole one is shown.
    ok(call("browser_navigate", {"url": f"{site}/tall.html"}))
    ok(call("browser_navigate", {"url": f"{site}/list.html"}))
    fresh = ok(call("browser_snapshot", {"interactive": True, "diff": True}))
    assert "- Diff: there is no earlier snapshot of this view on this page" in fresh
    assert '- button "Add"' in block(fresh)


def test_a_stale_ref_still_fails_loudly(call, site):
    page = ok(call("browser_navigate", {"url": f"{site}/list.html"}))
    budgeted = ok(call("browser_snapshot", {"interactive": True, "max_tokens": 100}))
    add = ref(budgeted, "button", "Add")
    assert add == ref(page, "button", "Add")
    ok(call("browser_navigate", {"url": f"{site}/tall.html"}))
    assert "not found in the current page" in failed(call("browser_click", {"element": "Add", "ref": add}))
    assert "not found in the current page" in failed(call("browser_snapshot", {"root": add}))
    assert "not found in the current page" in failed(call("browser_snapshot", {"root": add, "diff": True}))


def test_visible_shows_what_the_viewport_shows(call, site):
    page = ok(call("browser_navigate", {"url": f"{site}/tall.html"}))
    assert "Bottom button" in page
    top = block(ok(call("browser_snapshot", {"visible": True})))
    assert "Top button" in top and "Bottom button" not in top
    ok(call("browser_click", {"element": "Top button", "ref": ref(page, "button", "Top button")}))
    bottom = ok(call("browser_snapshot", {"visible": True}))
    assert "Bottom button" in block(bottom) and "Top button" not in block(bottom)
    # Refs are the tab's whatever the view: the same element, the same ref.
    assert ref(bottom, "button", "Bottom button") == ref(page, "button", "Bottom button")


def test_over_mcp_the_schema_has_the_arguments_and_a_call_takes_them(boxd, site):
    async def run():
        url = f"http://127.0.0.1:{boxd.port}/mcp"
        async with streamablehttp_client(url, headers={"Authorization": f"Bearer {TOKEN}"}) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = {tool.name: tool for tool in (await session.list_tools()).tools}
                await session.call_tool("browser_navigate", {"url": f"{site}/list.html"})
                answer = await session.call_tool("browser_snapshot", {"interactive": True, "max_tokens": 10})
                stale = await session.call_tool("browser_snapshot", {"root": "e99999"})
                return tools["browser_snapshot"], answer, stale

    tool, answer, stale = asyncio.run(run())
    properties = tool.inputSchema["properties"]
    assert set(properties) == {"interactive", "visible", "depth", "root", "max_tokens", "diff", "session"}
    assert not tool.inputSchema.get("required")
    assert answer.isError is False
    said = answer.content[0].text
    assert '- button "Add"' in said and "heading" not in block(said)
    assert len(block(said)) <= 40 and "- Snapshot cut:" in said
    assert stale.isError is True and "not found" in stale.content[0].text
