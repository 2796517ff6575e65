"""Anthropic's agent toolset (`agent_toolset_20260401`: bash, read, write, edit, glob, grep) in boxd against
the reference implementation from PyPI, call for call.

The reference is `anthropic.lib.tools.agent_toolset` of the `anthropic` package the test venv pins
(tests/python/requirements.txt: 2.14.0; its agent_toolset.py, _files.py and the
`BetaManagedAgentsAgentToolset20260401*Input` types are byte-identical to 2.10.0's, the release issue 48
names). It runs in this process on CPython 3.11 (its glob is pathlib's `Path.glob` of that version) exactly
as the SDK's session runner runs a tool (`SessionToolRunner._call_tool` in `_beta_session_runner.py`):
`run_runnable_tool`, then `tool_result_content`; a `ToolError` or any other exception becomes
`tool_error_content` (a non-ToolError exception reads as its `repr`, e.g. the `ValueError('Invalid arguments
for function read')` of bad argument types) with `is_error`; then `_to_session_content`, where an empty text
reads "(no output)". One `AgentToolContext` (so one bash shell) serves the whole corpus, and the shell is
closed at the end the way the runner closes it (`aclose_runnable_tool`, which drives the bash tool's
context manager out).

boxd is the real binary (`BOXD_BIN`) through the real agentscope-runtime client (`client.call_tool`). Its
workspace is a second tree made by the same `build_tree` (fixed contents, fixed and distinct mtimes, so
glob's newest-first order is fixed; the two roots have names of the same length, so grep's 100 KiB budget,
which counts the absolute paths, cuts at the same line). Per call the test compares the content (a text
block's text; an image or document block whole, boxd's MCP forms of them, an `image` item and an embedded
PDF `resource`, read as the SDK's blocks) with each workspace's path replaced by `<WS>`, and `is_error`
(boxd's `isError`). `rg` must not be on PATH: the reference's grep then walks the tree in
Python, which is what boxd matches (the test asserts it).

Documented divergences (compared on `is_error` and a prefix only):
- `exit 3`, then a command: the reference races the dead shell and answers "bash: bash session terminated;
  restart required", `BrokenResourceError()` or "(no output)" (its bug); boxd always answers the first, as
  the reference's docs promise.
- An invalid regex for grep: the text after "grep: invalid regex: " is Python `re`'s message in the
  reference and the `fancy-regex` crate's in boxd.

Arguments are validated as the reference validates them (pydantic's `validate_call`, lax mode): the corpus
includes what that accepts beyond the schema (numeric strings and integral floats as integers, integers past
64 bits) and what it refuses (wrong types, unknown keys, a missing required argument: `ValueError('Invalid
arguments for function NAME')`).

`REFERENCE_ONLY=1` runs the corpus against the reference alone (no boxd binary needed): the reference on
the second tree stands in for boxd, which shows the corpus is deterministic, and every answer is printed
(`-s`).
"""
import asyncio
import dataclasses
import json
import os
import pathlib
import shutil
import struct
import zlib

import pytest
from agentscope_runtime.sandbox.client.http_client import SandboxHttpClient
from agentscope_runtime.sandbox.model import ContainerModel
from anthropic.lib.tools._beta_functions import ToolError, aclose_runnable_tool
from anthropic.lib.tools._beta_session_runner import _to_session_content
from anthropic.lib.tools._tool_dispatch import run_runnable_tool, tool_error_content, tool_result_content
from anthropic.lib.tools.agent_toolset import AgentToolContext, beta_agent_toolset_20260401

from conftest import TOKEN, Boxd

REFERENCE_ONLY = os.environ.get("REFERENCE_ONLY") == "1"
TOOL_NAMES = ["bash", "read", "write", "edit", "glob", "grep"]
WS = "@WS@"  # in a call's arguments: that side's workspace path
PLACEHOLDER = "<WS>"
API_KEY = "sk-ant-api03-differential-test-secret"
BASE_MTIME = 1_700_000_000

BIG_LINES = 3000  # big.txt: 3000 lines of 100 bytes, 300 000 bytes (> 256 KiB); line 3000 is not UTF-8


def png_1x1() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
            + chunk(b"IEND", b""))


PDF = (b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\n"
       b"trailer<</Root 1 0 R>>\n%%EOF\n")


def build_tree(root: pathlib.Path, outside: pathlib.Path) -> None:
    """The workspace both sides start from. Every regular file and directory gets its own mtime (in creation
    order, one minute apart, the root last) so sorting by mtime never meets a tie; symlinks are kept out of the
    patterns that would also match their targets (a link's mtime is its target's)."""
    made: list[pathlib.Path] = []

    def d(rel: str) -> pathlib.Path:
        path = root / rel
        for parent in reversed([path, *path.relative_to(root).parents][:-1]):
            full = root / parent
            if not full.exists():
                full.mkdir()
                made.append(full)
        return path

    def f(rel: str, data) -> pathlib.Path:
        path = root / rel
        if isinstance(data, str):
            data = data.encode()
        path.write_bytes(data)
        made.append(path)
        return path

    root.mkdir()
    f("a.txt", "alpha\nbeta\ngamma\ndelta\nepsilon\n")
    f("notes.md", "# notes\nsome text\n")
    f("crlf.txt", b"one\r\ntwo\r\nthree\r\n")
    f("empty.txt", "")
    f("uni.txt", "h\u00e9llo w\u00f6rld \u2713 \U0001f389\n")
    f("latin1.txt", b"caf\xe9 match\nplain line\n")
    f("dup.txt", "x = 1\ny = 2\nx = 1\nx = 1\n")
    f("edit_me.txt", "one two three\nfour five\n")
    f("needle.txt", "first\nNEEDLE in a file\nlast\n")
    f("bin.dat", b"\x00\x01\x02 NEEDLE in a binary file\n")
    # A NUL past the first 512 bytes: grep reads the file as text.
    f("late_nul.txt", b"NEEDLE before\n" + b"." * 600 + b"\n\x00 nul line\nNEEDLE after\n")
    f(".hidden.txt", "hidden NEEDLE\n")
    d(".config")
    f(".config/settings.py", "def configure():\n    return {}\n")
    d(".git")
    f(".git/config", "NEEDLE in .git\n")
    d("node_modules/pkg")
    f("node_modules/pkg/index.js", "// NEEDLE in node_modules\n")
    d("sub/deep")
    f("sub/code.py", "import os\n\n\ndef hello(name):\n    return f'hi {name}'\n")
    f("sub/util.py", "def helper():\n    return 42\n")
    f("sub/deep/more.py", "def deeper(x):\n    return x * 2\n")
    f("sub/deep/data.txt", "deep data\n")
    f("big.txt", b"".join(
        (f"{n:05d} ".encode() + (b"\xff" if n == BIG_LINES else b"x") * 93 + b"\n")
        for n in range(1, BIG_LINES + 1)))
    f("longline.txt", b"short\n" + b"L" * 300_000 + b"\nend\n")
    f("pic.png", png_1x1())
    f("doc.pdf", PDF)
    f("photo.JPG", b"\xff\xd8\xff\xe0 not really a jpeg \xff\xd9")
    f("empty.png", b"")
    # The whole-file cap is 262 144 bytes: this file is at it, the next one a byte past it.
    f("cap.txt", b"START\n" + b"c" * (262_144 - 10) + b"\nEND")
    f("cap1.txt", b"START\n" + b"c" * (262_144 - 9) + b"\nEND")
    d("spaced dir")
    f("spaced dir/\u00fcn\u00ef.txt", "unicode NEEDLE here\n")
    d("grep")
    # Lines of 2000 bytes with their newline are searched, longer ones are not.
    f("grep/long.txt", b"NEEDLE" + b"k" * 1993 + b"\n" + b"NEEDLE" + b"s" * 1994 + b"\nNEEDLE short\n")
    # A last line without its newline: 2000 bytes are searched.
    f("grep/eof.txt", b"first\nNEEDLE" + b"e" * 1994)
    d("grepbig")
    # 150 KB of matching lines with a non-ASCII character each: the 100 KiB budget counts characters.
    f("grepbig/bulk.log", "".join(f"BULK \u00e9 row {n:05d} {'z' * 40}\n" for n in range(1, 2501)))
    d("many")
    for n in range(250):
        f(f"many/m{n:03d}.tmp", f"{n}\n")
    os.mkfifo(root / "fifo")
    made.append(root / "fifo")
    # Symlinks: inside to inside (file, dir), inside to outside (file, dir, /etc/hostname), dangling, a loop.
    (root / "link_a.lnk").symlink_to("a.txt")
    (root / "sub_link").symlink_to("sub")
    (root / "deep_link").symlink_to("sub/deep")
    (root / "host_link").symlink_to("/etc/hostname")
    (root / "out_file.lnk").symlink_to(outside / "secret.txt")
    (root / "out_dir").symlink_to(outside)
    (root / "dangling.lnk").symlink_to("nowhere.txt")
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("loop1")
    (root / "needle.lnk").symlink_to("needle.txt")
    made.append(root)
    for n, path in enumerate(made):
        stamp = (BASE_MTIME + 60 * n) * 1_000_000_000
        os.utime(path, ns=(stamp, stamp), follow_symlinks=False)


@dataclasses.dataclass
class Divergence:
    why: str
    reference_prefixes: tuple  # the reference's text starts with one of these
    boxd_prefix: str


@dataclasses.dataclass
class Case:
    tool: str
    args: dict
    divergence: Divergence | None = None


def C(tool, **args):
    return Case(tool, args)


EXITED_SHELL = Divergence(
    "the reference's bug after the shell exits (it races the dead shell)",
    ("bash: bash session terminated; restart required", "BrokenResourceError(", "(no output)"),
    "bash: bash session terminated; restart required")
BAD_REGEX = Divergence("Python re's message against the Rust regex crate's", ("grep: invalid regex: ",),
                       "grep: invalid regex: ")

CORPUS = [
    # --- read -------------------------------------------------------------------------------------------
    C("read", file_path="a.txt"),
    C("read", file_path="a.txt", view_range=[2, 4]),
    C("read", file_path="a.txt", view_range=[3, 0]),
    C("read", file_path="a.txt", view_range=[3, -1]),
    C("read", file_path="a.txt", view_range=[5, 2]),
    C("read", file_path="a.txt", view_range=[2, 2]),
    C("read", file_path="a.txt", view_range=[0, 2]),
    C("read", file_path="a.txt", view_range=[-4, 2]),
    C("read", file_path="a.txt", view_range=[10, 20]),
    # integers past 64 bits are Python integers to the reference
    C("read", file_path="a.txt", view_range=[2, 10**20]),
    C("read", file_path="a.txt", view_range=[-10**20, 1]),
    C("read", file_path="a.txt", view_range=[2]),
    C("read", file_path="a.txt", view_range=[1, 2, 3]),
    C("read", file_path="a.txt", view_range=[]),
    C("read", file_path="a.txt", view_range=None),
    C("read", file_path="nope.txt"),
    C("read", file_path="nodir/nope.txt"),
    C("read", file_path="a.txt/child"),
    C("read", file_path="a.txt/"),
    C("read", file_path="./sub//code.py"),
    C("read", file_path="sub/deep/../../a.txt"),
    # `..` is collapsed before symlinks are followed: this is the workspace's a.txt, not sub/a.txt
    C("read", file_path="deep_link/../a.txt"),
    C("read", file_path="a\x00b"),
    C("read", file_path="sub"),
    C("read", file_path=""),
    C("read", file_path="fifo"),
    C("read", file_path="../x"),
    C("read", file_path="../it's"),
    C("read", file_path="../tab\there"),
    C("read", file_path=f"{WS}/sub/../a.txt"),
    C("read", file_path=f"{WS}/nope.txt"),
    C("read", file_path=f"{WS}2/x"),
    C("read", file_path="/etc/hostname"),
    C("read", file_path="link_a.lnk"),
    C("read", file_path="sub_link/code.py"),
    C("read", file_path="host_link"),
    C("read", file_path="out_file.lnk"),
    C("read", file_path="out_dir/secret.txt"),
    C("read", file_path="dangling.lnk"),
    C("read", file_path="loop1"),
    C("read", file_path="latin1.txt"),
    C("read", file_path="crlf.txt"),
    C("read", file_path="crlf.txt", view_range=[2, 3]),
    C("read", file_path="empty.txt"),
    C("read", file_path="uni.txt"),
    C("read", file_path="big.txt"),
    C("read", file_path="big.txt", view_range=[1, 3]),
    C("read", file_path="big.txt", view_range=[2998, 2999]),
    C("read", file_path="big.txt", view_range=[2999, 3000]),
    C("read", file_path="big.txt", view_range=[5, 2]),
    C("read", file_path="big.txt", view_range=[5000, 5001]),
    C("read", file_path="big.txt", view_range=[1, 2600]),
    C("read", file_path="big.txt", view_range=[1, 2700]),
    C("read", file_path="big.txt", view_range=[1, 0]),
    C("read", file_path="cap.txt"),
    C("read", file_path="cap1.txt"),
    C("read", file_path="cap1.txt", view_range=[1, 1]),
    C("read", file_path="longline.txt"),
    C("read", file_path="longline.txt", view_range=[1, 1]),
    C("read", file_path="longline.txt", view_range=[2, 2]),
    C("read", file_path="longline.txt", view_range=[3, 3]),
    C("read", file_path="longline.txt", view_range=[3, 10**20]),
    C("read", file_path="longline.txt", view_range=[1, 3]),
    C("read", file_path="pic.png"),
    C("read", file_path="doc.pdf"),
    C("read", file_path="photo.JPG"),
    C("read", file_path="empty.png"),
    C("read", file_path="pic.png", view_range=[1, 2]),
    C("read", file_path=3),
    C("read"),
    C("read", file_path="a.txt", bogus=1),
    # pydantic's lax mode, as the reference validates: numeric strings and integral floats are integers
    C("read", file_path="a.txt", view_range=["1", "2"]),
    C("read", file_path="a.txt", view_range=[1.0, 2.0]),
    C("read", file_path="a.txt", view_range=[1.5, 2]),
    C("read", file_path="a.txt", view_range="1,2"),
    # --- glob (before any write: mtimes as built) --------------------------------------------------------
    C("glob", pattern="**/*.py"),
    C("glob", pattern="*.txt"),
    C("glob", pattern="**"),
    C("glob", pattern="sub/*"),
    C("glob", pattern="sub/**"),
    C("glob", pattern="sub/**/*.py"),
    C("glob", pattern="sub/"),
    C("glob", pattern="**/*.txt", path="spaced dir"),
    C("glob", pattern="**/deep"),
    C("glob", pattern="*.py", path="sub"),
    C("glob", pattern="**/*.txt", path=f"{WS}/sub"),
    C("glob", pattern="*", path="sub_link"),
    C("glob", pattern="sub_link/*"),
    C("glob", pattern="out_dir/*"),
    C("glob", pattern="*", path="../"),
    C("glob", pattern="*", path="out_dir"),
    C("glob", pattern="/etc/*"),
    C("glob", pattern="../*"),
    C("glob", pattern="sub/../*.txt"),
    C("glob", pattern="*.nothing"),
    C("glob", pattern="*.TXT"),
    C("glob", pattern="[ab]*.txt"),
    C("glob", pattern=".*"),
    C("glob", pattern="many/*"),
    C("glob", pattern="*", path="a.txt"),
    C("glob", pattern="*", path="nope"),
    C("glob", pattern="*.lnk"),
    C("glob", pattern="loop*"),
    C("glob", pattern="sub_link/**/*.py"),
    C("glob", pattern="a\x00b"),
    C("glob", pattern="*", path="a\x00b"),
    C("glob", pattern="*.md", path=""),
    C("glob", pattern=""),
    C("glob", pattern="***"),
    # Python 3.11's Path.glob raises IndexError here, which the reference does not catch: the runner's repr
    C("glob", pattern="."),
    C("glob", pattern=5),
    C("glob"),
    # --- grep -------------------------------------------------------------------------------------------
    C("grep", pattern=r"def \w+\("),
    C("grep", pattern="NEEDLE"),
    C("grep", pattern="beta", path="a.txt"),
    C("grep", pattern="^gam+a$", path="a.txt"),
    C("grep", pattern="", path="a.txt"),
    C("grep", pattern="hel", path="sub"),
    C("grep", pattern="alpha", path="link_a.lnk"),
    C("grep", pattern="hel", path="sub_link"),
    C("grep", pattern="NEEDLE", path="bin.dat"),
    C("grep", pattern="caf", path="latin1.txt"),
    C("grep", pattern="two", path="crlf.txt"),
    C("grep", pattern="(?i)EPSILON"),
    C("grep", pattern="no-such-text-anywhere"),
    C("grep", pattern="x", path="nope"),
    C("grep", pattern="x", path="../"),
    C("grep", pattern="x", path="host_link"),
    C("grep", pattern="BULK", path="grepbig"),
    C("grep", pattern="x", path="fifo"),
    C("grep", pattern="x", path="dangling.lnk"),
    C("grep", pattern="a", path="a\x00b"),
    C("grep", pattern=r"alp(?=ha)", path="a.txt"),
    C("grep", pattern=r"(\w)\1", path="a.txt"),
    Case("grep", {"pattern": "("}, BAD_REGEX),
    Case("grep", {"pattern": "a{2,1}"}, BAD_REGEX),
    C("grep", pattern=None),
    # --- write ------------------------------------------------------------------------------------------
    C("write", file_path="new/deep/file.txt", content="hello\n"),
    C("read", file_path="new/deep/file.txt"),
    C("write", file_path="notes.md", content="replaced\n"),
    C("read", file_path="notes.md"),
    C("write", file_path="uni_out.txt", content="h\u00e9llo w\u00f6rld \u2713 \U0001f389"),
    C("read", file_path="uni_out.txt"),
    C("write", file_path="empty_out.txt", content=""),
    C("write", file_path=f"{WS}/abs_out.txt", content="abs\n"),
    C("write", file_path="../outside.txt", content="x"),
    C("write", file_path="/tmp/agent-toolset-outside.txt", content="x"),
    C("write", file_path="out_file.lnk", content="x"),
    C("write", file_path="sub", content="x"),
    C("write", file_path="a.txt/child.txt", content="x"),
    C("write", file_path="dangling.lnk", content="through a dangling link\n"),
    C("write", file_path="newdir/", content="a trailing slash\n"),
    C("read", file_path="newdir"),
    C("write", file_path="", content="x"),
    C("write", file_path="crlf_out.txt", content="a\r\nb\r\n"),
    C("write", file_path="a\x00b", content="x"),
    C("write", file_path="link_a.lnk", content="through a link\n"),
    C("read", file_path="a.txt"),
    C("read", file_path="nowhere.txt"),
    C("write", file_path="x.txt"),
    C("write", file_path="x.txt", content=7),
    # --- edit -------------------------------------------------------------------------------------------
    C("edit", file_path="edit_me.txt", old_string="two", new_string="TWO"),
    C("edit", file_path="edit_me.txt", old_string="absent", new_string="x"),
    C("edit", file_path="edit_me.txt", old_string="four ", new_string=""),
    C("read", file_path="edit_me.txt"),
    C("edit", file_path="dup.txt", old_string="x = 1", new_string="x = 9"),
    C("edit", file_path="dup.txt", old_string="x = 1", new_string="x = 9", replace_all=True),
    C("edit", file_path="dup.txt", old_string="y = 2", new_string="y = 3", replace_all=True),
    C("read", file_path="dup.txt"),
    C("edit", file_path="uni.txt", old_string="", new_string="!"),
    C("edit", file_path="empty.txt", old_string="", new_string="seeded\n"),
    C("read", file_path="empty.txt"),
    C("edit", file_path="crlf.txt", old_string="two", new_string="TWO"),
    C("read", file_path="crlf.txt"),
    C("edit", file_path="big.txt", old_string="00001", new_string="x"),
    C("edit", file_path="cap.txt", old_string="START", new_string="BEGIN"),
    C("read", file_path="cap.txt", view_range=[1, 1]),
    C("edit", file_path="cap1.txt", old_string="START", new_string="BEGIN"),
    C("edit", file_path="", old_string="a", new_string="b"),
    C("edit", file_path="uni.txt", old_string="w\u00f6rld", new_string="world"),
    C("edit", file_path="latin1.txt", old_string="caf", new_string="x"),
    C("edit", file_path="nope.txt", old_string="a", new_string="b"),
    C("edit", file_path="sub", old_string="a", new_string="b"),
    C("edit", file_path="fifo", old_string="a", new_string="b"),
    C("edit", file_path="../x", old_string="a", new_string="b"),
    C("edit", file_path="out_file.lnk", old_string="a", new_string="b"),
    C("edit", file_path="edit_me.txt", old_string="one"),
    # --- bash -------------------------------------------------------------------------------------------
    C("bash", command="echo hello"),
    C("bash", command="cd sub"),
    C("bash", command="pwd"),
    C("bash", command="X=42"),
    C("bash", command="echo \"x=$X\""),
    C("bash", command="echo out; echo err >&2"),
    C("bash", command="echo before; false"),
    C("bash", command="false"),
    C("bash", command="ls /no-such-dir-agent-toolset"),
    C("bash", command="cat; echo \"cat done\""),
    C("bash", command="read line; echo \"read rc=$?\""),
    C("bash", command="printf '\\033[31mred\\033[0m plain \\033[1;4mbold\\033[m\\n'"),
    C("bash", command="seq 1 30000"),
    C("bash", command="seq 1 30000; false"),
    C("bash", command="printf abc"),
    C("bash", command="echo \"key=[${ANTHROPIC_API_KEY-unset}]\"; env | grep -c '^ANTHROPIC_' || true"),
    C("bash", command="echo \"term=$TERM ps1=[$PS1]\""),
    C("bash", command="printf 'caf\\xe9\\n'"),
    C("bash", command="printf '  indented\\n\\n\\n'"),
    C("bash", command="printf 'a\\0b\\r\\nc\\n'"),
    C("bash", command="printf '\\033]0;title\\007osc\\n'"),
    C("bash", command="head -c 150000 /dev/zero | tr '\\0' a; echo; echo tail-line"),
    C("bash", command="for i in 1 2 3; do\necho \"n$i\"\ndone"),
    C("bash", command="echo __ANT_CMD_fake_DONE__0; echo still"),
    C("bash", command=""),
    C("bash"),
    C("bash", command=5),
    C("bash", command="echo lax", timeout_ms="1000"),
    C("bash", command="echo fast", timeout_ms=10_000),
    C("bash", command="echo none", timeout_ms=None),
    C("bash", command="echo long", timeout_ms=2**40),
    C("bash", command="echo longer", timeout_ms=10**20),
    C("bash", command="echo default", timeout_ms=0),
    C("bash", command="echo not restarted", restart=False),
    C("bash", command="sleep 5", timeout_ms=500),
    C("bash", command="echo after the timeout"),
    C("bash", restart=True),
    # the timeout in the message is Python's float of timeout_ms / 1000
    C("bash", command="sleep 3", timeout_ms=1000),
    C("bash", restart=True),
    C("bash", command="sleep 3", timeout_ms=1),
    C("bash", restart=True),
    C("bash", command="echo never", timeout_ms=-5),
    C("bash", restart=True),
    C("bash", command="pwd; echo \"x=$X\""),
    C("bash", command="exit 3"),
    Case("bash", {"command": "echo after exit"}, EXITED_SHELL),
    C("bash", restart=True),
    # bash's own messages name it and count the lines it was fed since it started
    C("bash", command="cd /no-such-dir-agent-toolset"),
    C("bash", command="echo $LINENO"),
    C("bash", command="echo a\necho $LINENO"),
    C("bash", command="echo \"$0\""),
    C("bash", command="echo alive"),
    C("bash", restart=True, command="echo ignored"),
    C("bash", command="cd / && pwd"),
    C("bash", command="cd - >/dev/null; pwd"),
]


def substitute(value, workspace: str):
    if isinstance(value, str):
        return value.replace(WS, workspace)
    if isinstance(value, list):
        return [substitute(v, workspace) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, workspace) for k, v in value.items()}
    return value


def normalise(content, workspace: str) -> list:
    """A result's blocks as the model sees them, the workspace's path as `<WS>`."""
    blocks = []
    for block in content or []:
        if block.get("type") == "text":
            blocks.append({"type": "text", "text": block.get("text", "").replace(workspace, PLACEHOLDER)})
        elif block.get("type") == "image" and "mimeType" in block:
            # MCP's image item carries what the SDK's image block carries.
            blocks.append({"type": "image", "source": {"type": "base64", "media_type": block["mimeType"],
                                                       "data": block["data"]}})
        elif block.get("type") == "resource" and block.get("resource", {}).get("mimeType") == "application/pdf":
            # A PDF is an embedded resource in MCP, a document block in the SDK: the same bytes.
            blocks.append({"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                                          "data": block["resource"]["blob"]}})
        else:
            blocks.append(block)
    return blocks


class Reference:
    """The SDK's toolset on one context, called as `SessionToolRunner._call_tool` calls a tool."""

    def __init__(self, workspace: pathlib.Path):
        self.runner = asyncio.Runner()
        self.ctx = AgentToolContext(workdir=str(workspace))
        self.tools = {tool.name: tool for tool in beta_agent_toolset_20260401(self.ctx)}

    async def _call(self, name: str, arguments: dict):
        is_error = False
        try:
            content = tool_result_content(await run_runnable_tool(self.tools[name], arguments))
        except ToolError as e:
            content = tool_error_content(e)
            is_error = True
        except Exception as e:  # the runner's own catch-all: repr of the exception, as an error
            content = tool_error_content(e)
            is_error = True
        session_content, _recorded = _to_session_content(content)
        return session_content, is_error

    def call(self, name: str, arguments: dict):
        return self.runner.run(self._call(name, arguments))

    async def _close(self):
        for tool in self.tools.values():
            await aclose_runnable_tool(tool)
        await self.ctx.close()

    def close(self):
        try:
            self.runner.run(self._close())
        finally:
            self.runner.close()


def client_for(server: Boxd, container_id: str) -> SandboxHttpClient:
    """A client of the sandbox manager's shape; the session header it sends is "s" + container_id."""
    model = ContainerModel(session_id=f"session-{container_id}", container_id=container_id,
                           container_name="boxd-test", url=f"http://127.0.0.1:{server.port}/",
                           ports=[server.port], runtime_token=TOKEN, timeout=120)
    return SandboxHttpClient(model, timeout=20)


def rg_the_reference_would_run():
    """The `rg` the reference's grep would run instead of its Python walk (agent_toolset.beta_grep_tool)."""
    candidates = (shutil.which(os.path.join(entry, "rg")) for entry in os.get_exec_path()
                  if pathlib.Path(entry).is_absolute())
    return next((rg for rg in candidates if rg), None)


@pytest.fixture
def workspaces(tmp_path):
    base = tmp_path.resolve()
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("outside secret NEEDLE\n")
    reference, ours = base / "ws-ref", base / "ws-box"
    assert len(str(reference)) == len(str(ours))  # grep's byte budget counts the paths
    build_tree(reference, outside)
    build_tree(ours, outside)
    return reference, ours


def describe(answer) -> str:
    content, is_error = answer
    return f"is_error={is_error} " + json.dumps(content, ensure_ascii=False)[:3000]


def agrees(case: Case, reference, ours, second_is_reference=False) -> bool:
    if case.divergence is None:
        return reference == ours
    (ref_content, ref_error), (our_content, our_error) = reference, ours
    ref_text = ref_content[0].get("text", "") if ref_content else ""
    our_text = our_content[0].get("text", "") if our_content else ""
    our_prefixes = case.divergence.reference_prefixes if second_is_reference else case.divergence.boxd_prefix
    return (ref_error == our_error and ref_text.startswith(case.divergence.reference_prefixes)
            and our_text.startswith(our_prefixes))


def test_corpus_call_for_call(workspaces, monkeypatch):
    """Under REFERENCE_ONLY=1 the second side is the reference again, on the second tree: the corpus is then
    checked to be deterministic (the same answers from two trees), and printed."""
    reference_root, boxd_root = workspaces
    assert len(CORPUS) >= 70
    assert rg_the_reference_would_run() is None, "rg on PATH: the reference would not walk in Python"
    # In both environments; neither shell may see it.
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)

    reference = Reference(reference_root)
    server = client = second = None
    if REFERENCE_ONLY:
        second = Reference(boxd_root)
    else:
        server = Boxd(boxd_root, env={"ANTHROPIC_API_KEY": API_KEY})
    mismatches = []
    try:
        if server:
            client = server.client()
            client.__enter__()
        for n, case in enumerate(CORPUS):
            ref_answer = reference.call(case.tool, substitute(case.args, str(reference_root)))
            ref_answer = (normalise(ref_answer[0], str(reference_root)), ref_answer[1])
            if second:
                our_answer = second.call(case.tool, substitute(case.args, str(boxd_root)))
                our_answer = (normalise(our_answer[0], str(boxd_root)), our_answer[1])
                print(f"#{n} {case.tool} {json.dumps(case.args, ensure_ascii=False)}\n  {describe(ref_answer)}")
            else:
                result = client.call_tool(case.tool, substitute(case.args, str(boxd_root)))
                our_answer = (normalise(result.get("content"), str(boxd_root)), result.get("isError"))
            if not agrees(case, ref_answer, our_answer, second_is_reference=second is not None):
                mismatches.append((n, case, ref_answer, our_answer))
    finally:
        reference.close()
        if second:
            second.close()
        if server:
            server.stop()
    for n, case, ref_answer, our_answer in mismatches:
        print(f"MISMATCH #{n} {case.tool} {json.dumps(case.args, ensure_ascii=False)}"
              + (f" (divergence: {case.divergence.why})" if case.divergence else "")
              + f"\n  reference: {describe(ref_answer)}\n  {'second' if second else 'boxd'}:      "
              + describe(our_answer))
    assert not mismatches, f"{len(mismatches)} of {len(CORPUS)} calls differ: " + ", ".join(
        f"#{n} {case.tool} {json.dumps(case.args, ensure_ascii=False)[:80]}" for n, case, _, _ in mismatches)


@pytest.mark.skipif(REFERENCE_ONLY, reason="REFERENCE_ONLY=1: no boxd")
def mcp_tools_list(port):
    """What boxd's own MCP server (`/mcp`, streamable HTTP) lists, as an MCP client reads it."""
    import asyncio

    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    async def run():
        url = f"http://127.0.0.1:{port}/mcp"
        async with streamablehttp_client(url, headers={"Authorization": f"Bearer {TOKEN}"}) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return {tool.name: tool for tool in (await session.list_tools()).tools}

    return asyncio.run(run())


def differences_between(name, theirs, ours):
    flat = lambda definition: {"name": definition["name"], "description": definition["description"],
                               **{f"input_schema.{key}": value
                                  for key, value in definition["input_schema"].items()}}
    theirs, ours = flat(theirs), flat(ours)
    return [f"{name} {key}: SDK {json.dumps(theirs.get(key, '(absent)'))}, "
            f"boxd {json.dumps(ours.get(key, '(absent)'))}"
            for key in sorted(set(ours) | set(theirs)) if ours.get(key, ...) != theirs.get(key, ...)]


@pytest.mark.skipif(REFERENCE_ONLY, reason="REFERENCE_ONLY=1: no boxd")
def test_tool_definitions_are_the_sdks(tmp_path):
    """The SDK's `beta_agent_toolset_20260401` tool definitions (`to_dict()`) are what boxd's MCP server
    lists, key for key; agentscope's `/mcp/list_tools` lists the same but for the `required: []` its
    contract always writes (the SDK leaves `required` out of `bash`, whose arguments are all optional)."""
    sdk = {tool.to_dict()["name"]: tool.to_dict()
           for tool in beta_agent_toolset_20260401(AgentToolContext(workdir=str(tmp_path)))}
    assert sorted(sdk) == sorted(TOOL_NAMES)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    server = Boxd(workspace)
    try:
        over_mcp = mcp_tools_list(server.port)
        with server.client() as client:
            listed = client.list_tools()
    finally:
        server.stop()
    differences = []
    group = listed.get("anthropic", {})
    for name in TOOL_NAMES:
        assert name in over_mcp, f"{name} is not in boxd's MCP tools/list"
        tool = over_mcp[name]
        differences += differences_between(
            name, sdk[name], {"name": tool.name, "description": tool.description, "input_schema": tool.inputSchema})
        assert name in group, f"{name} is not listed in the anthropic group: {sorted(group)}"
        function = group[name]["json_schema"]["function"]
        parameters = dict(function["parameters"])
        if parameters.get("required") == [] and "required" not in sdk[name]["input_schema"]:
            del parameters["required"]
        differences += differences_between(
            f"{name} (/mcp/list_tools)", sdk[name],
            {"name": function["name"], "description": function["description"], "input_schema": parameters})
    assert not differences, "\n".join(differences)
    for other_group, tools in listed.items():
        if other_group != "anthropic":
            assert not set(tools) & set(TOOL_NAMES), (other_group, sorted(set(tools) & set(TOOL_NAMES)))


@pytest.mark.skipif(REFERENCE_ONLY, reason="REFERENCE_ONLY=1: no boxd")
def test_each_session_has_its_own_shell(tmp_path):
    workspace = (tmp_path / "ws").resolve()
    workspace.mkdir()
    (workspace / "sub").mkdir()
    server = Boxd(workspace)

    def bash(client, command):
        result = client.call_tool("bash", {"command": command})
        assert result.get("isError") is False, (command, result)
        return result["content"][0]["text"]

    try:
        with client_for(server, "session-a") as a, client_for(server, "session-b") as b, \
                client_for(server, "session-a") as a_again:
            assert bash(a, "cd sub && V=from-a && pwd") == f"{workspace}/sub"
            assert bash(b, "pwd") == str(workspace)
            assert bash(b, "echo \"v=${V-unset}\"") == "v=unset"
            bash(b, "V=from-b")
            # The same session id from another client is the same shell.
            assert bash(a_again, "pwd") == f"{workspace}/sub"
            assert bash(a_again, "echo \"v=$V\"") == "v=from-a"
            assert bash(b, "echo \"v=$V\"") == "v=from-b"
            # A restart is the session's own.
            assert a.call_tool("bash", {"restart": True})["content"][0]["text"] == "bash session restarted"
            assert bash(a, "pwd") == str(workspace)
            assert bash(b, "echo \"v=$V\"") == "v=from-b"
    finally:
        server.stop()
