"""The interactive view's two finders list the same elements: the page's own walk (boxd's default,
`--browser-interactive-finder page`) against Chromium's DOM snapshot (`dom`), on the test pages and on
pages written here for what each reads differently (shadow trees open and closed, click listeners,
editing, inherited pointers, hidden, inert, zero-size and undisplayed elements, SVG links, disabled
controls, a root ref, the viewport), through the SDK's `SandboxHttpClient.call_tool`."""
import functools
import pathlib
import re
import shutil

import pytest

from browser_support import Pages, browser_boxd, ok, serving

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian chromium is not installed")

TEST_PAGES = pathlib.Path(__file__).resolve().parent.parent / "browser"

EDGE_PAGES = {
    "/shadow.html": """<!doctype html><body><h1>Shadow</h1>
<open-card id="o"><span slot="title">Light title</span><button>Light button</button></open-card>
<p>between</p><plain-el><a href="#plain">Plain custom link</a></plain-el>
<script>
const root = document.getElementById('o').attachShadow({mode: 'open'});
root.innerHTML = '<style>:host{display:block}</style><button>Shadow button</button>' +
  '<slot name="title"></slot><div style="cursor:pointer">Shadow pointer</div><slot></slot>' +
  '<inner-el></inner-el>';
root.querySelector('inner-el').attachShadow({mode: 'open'}).innerHTML = '<a href="#deep">Deep link</a>';
</script></body>""",
    "/closed.html": """<!doctype html><body><h1>Closed</h1><a href="#a">Before</a><closed-el id="c"></closed-el>
<a href="#b">After</a>
<script>document.getElementById('c').attachShadow({mode: 'closed'}).innerHTML =
  '<button>Closed button</button>';</script></body>""",
    "/looks.html": """<!doctype html><head><style>
.pointer { cursor: pointer } .pointer * { color: #333 } .contents { display: contents }
.zero { width: 0; height: 0; overflow: hidden } .float { float: left; width: 40px; height: 20px }
.gen::before { content: "icon"; position: absolute }
</style></head><body>
<div class="pointer" id="p1"><span>inherits</span><div class="pointer">set again</div></div>
<div id="listener">listened div</div><div id="down">mousedown div</div><div id="key">keydown only</div>
<div onclick="void 0">onclick attribute</div>
<section tabindex="0">tabbable section</section><section tabindex="-1">untabbable</section>
<section tabindex=" +2 ">padded tabindex</section>
<button disabled id="dis">Disabled</button><div role="button" aria-disabled="true">Role button</div>
<fieldset disabled><button>In disabled fieldset</button><input aria-label="disabled field"></fieldset>
<div contenteditable="true">Editable <b>bold</b></div><div contenteditable="false">Not editable</div>
<span contenteditable>bare attribute</span>
<div aria-hidden="true"><button>Aria hidden</button></div><div inert><button>Inert</button></div>
<div aria-hidden="TRUE"><a href="#x">Upper hidden</a></div>
<div style="display:none"><button>Undisplayed</button></div>
<div style="visibility:hidden"><button>Invisible visibility</button></div>
<div class="contents"><button>In contents</button></div>
<div class="zero"><button>In zero box</button></div>
<button class="zero" style="padding:0;border:0">Zero button</button>
<div class="gen pointer" style="width:0;height:0"></div>
<div style="height:0"><div class="float"><a href="#f">Floated link</a></div></div>
<svg width="40" height="20"><a href="#svg"><text x="0" y="15">SVG link</text></a></svg>
<a>no href</a><a href="">empty href</a><area href="#area">
<input type="hidden" value="h"><input type="HIDDEN"><input type="checkbox" aria-label="check">
<details><summary>More</summary><button>In details</button></details>
<select aria-label="choice"><option>One</option><option>Two</option></select>
<label><input type="radio" name="r"> Radio label</label>
<label for="nothing">Label without control</label><label for="off">Label of a disabled field</label>
<input id="off" disabled aria-label="off field"><label>Label of a text field <input></label>
<input type="button" value="Input button"><input type="submit"><input type="reset"><input type="file">
<input type="color" aria-label="colour"><input type="range" aria-label="range">
<input type="image" alt="Image input" width="10" height="10"><input type="date" aria-label="date">
<input type="checkbox" disabled aria-label="disabled check"><textarea aria-label="area"></textarea>
<a href="#l"><span>Inner span</span></a><img src="x.png" alt="img" width="10" height="10" usemap="#m">
<map name="m"><area href="#inmap" shape="rect" coords="0,0,5,5" alt="map area"></map>
<div role="tab checkbox">Two roles</div><div role=" link ">Spaced role</div>
<video controls width="80" height="40"></video>
<ul><li style="cursor:pointer">Pointer item</li><li>plain item</li></ul>
<script>
document.getElementById('listener').addEventListener('click', () => {});
document.getElementById('down').addEventListener('mousedown', () => {});
document.getElementById('key').addEventListener('keydown', () => {});
document.getElementById('dis').addEventListener('click', () => {});
</script></body>""",
    "/tamper.html": """<!doctype html><body><button>Still here</button>
<ul><li style="cursor:pointer">Pointer item</li></ul>
<script>Element.prototype.getClientRects = () => []; window.getComputedStyle = () => ({cursor: 'auto'});
Element.prototype.checkVisibility = () => false;</script></body>""",
    "/design.html": """<!doctype html><body><p>Design mode</p><div>text</div><button>B</button>
<script>document.designMode = 'on';</script></body>""",
    "/tall.html": "<!doctype html><body>" + "".join(
        f'<p style="height:120px">Block {n} <a href="#l{n}">Link {n}</a><button>Button {n}</button></p>'
        for n in range(40)) + "<script>window.scrollTo(0, 1500)</script></body>",
}


class FinderPages(Pages):
    def do_GET(self):
        body = EDGE_PAGES.get(self.path)
        if body is None:
            return super().do_GET()
        self.answer(body.encode(), "text/html")


@pytest.fixture(scope="module")
def site():
    with serving(functools.partial(FinderPages, directory=str(TEST_PAGES))) as base:
        yield base


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    page = browser_boxd(tmp_path_factory.mktemp("page"))
    dom = browser_boxd(tmp_path_factory.mktemp("dom"), "--browser-interactive-finder", "dom")
    try:
        with page.client() as page_client, dom.client() as dom_client:
            yield page_client.call_tool, dom_client.call_tool
    finally:
        page.stop()
        dom.stop()


def both(pair, name, arguments):
    page, dom = pair
    return ok(page(name, arguments)), ok(dom(name, arguments))


def numbered(answer):
    """`answer` with its refs renumbered in the order they first appear: a tab numbers the elements
    that get a ref for the first time in an order of its own, not the finder's."""
    seen = {}
    return re.sub(r"\be\d+\b", lambda match: seen.setdefault(match.group(0), f"r{len(seen)}"), answer)


def view(answer):
    """The snapshot's lines, and its notes (the lines after the block)."""
    match = re.search(r"```yaml\n(.*?)\n```\n?(.*)", answer, re.S)
    assert match, answer
    return match.group(1), match.group(2)


PAGES = ["/shadow.html", "/closed.html", "/looks.html", "/design.html", "/tall.html", "/clickable.html",
         "/form.html", "/page2.html", "/resize.html", "/upload-read.html", "/paced.html"]


@pytest.mark.parametrize("path", PAGES)
def test_both_finders_list_the_same_elements(pair, site, path):
    both(pair, "browser_navigate", {"url": site + path})
    for arguments in ({"interactive": True}, {"interactive": True, "visible": True},
                      {"interactive": True, "depth": 1}):
        page, dom = both(pair, "browser_snapshot", arguments)
        assert numbered(page) == numbered(dom), (path, arguments)


@pytest.mark.parametrize("path", ["/clickable.html", "/tall.html", "/looks.html"])
def test_within_a_size_the_lines_are_the_same_and_the_rest_is_counted_at_least(pair, site, path):
    both(pair, "browser_navigate", {"url": site + path})
    page, dom = both(pair, "browser_snapshot", {"interactive": True, "max_tokens": 60})
    (page_lines, page_notes), (dom_lines, dom_notes) = view(numbered(page)), view(numbered(dom))
    assert page_lines == dom_lines
    exact = re.search(r"(\d+) lines with (\d+) elements are not shown\. They are under ([^(]*) \(", dom_notes)
    assert exact, dom_notes
    counted = re.search(r"\(at least (\d+) lines with (\d+) elements: the page was read only as far as this "
                        r"view needed\)\. They are under ([^(]*) and more \(", page_notes)
    if counted is None:
        # The walk reached the end: the count is the DOM snapshot's.
        assert page_notes == dom_notes
        return
    assert int(counted.group(1)) <= int(exact.group(1)) and int(counted.group(2)) <= int(exact.group(2))
    # As many refs are named (the first ones past the size).
    named = re.sub(r" and \d+ more$", "", exact.group(3)).split(", ")
    assert len(counted.group(3).split(", ")) == len(named)


def test_a_root_ref_narrows_both_alike(pair, site):
    both(pair, "browser_navigate", {"url": site + "/looks.html"})
    narrowed = []
    for call in pair:
        whole = ok(call("browser_snapshot", {}))
        fieldset = re.search(r"- group [^\n]*\[ref=(e\d+)\]", whole)
        assert fieldset, whole
        narrowed.append(ok(call("browser_snapshot", {"interactive": True, "root": fieldset.group(1)})))
    assert numbered(narrowed[0]) == numbered(narrowed[1])
    assert "In disabled fieldset" in narrowed[0] and "Editable" not in narrowed[0]


def test_the_page_finder_is_not_fooled_by_the_page_s_own_scripts(pair, site):
    # A page that replaces what a walk in its own world would call: the finder's world is boxd's.
    both(pair, "browser_navigate", {"url": site + "/tamper.html"})
    page, dom = both(pair, "browser_snapshot", {"interactive": True})
    assert numbered(page) == numbered(dom)
    assert '- button "Still here"' in page and "- listitem [level=1] [ref=" in page
