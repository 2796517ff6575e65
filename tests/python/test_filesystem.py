"""The native filesystem tools against the real reference server, side by side.

The reference (@modelcontextprotocol/server-filesystem@2025.3.28, installed by scripts/setup.sh) is hosted
through boxd's own MCP hosting on one scratch tree; boxd's native tools work on an identical second tree.
The same scripted calls go to both through the real SandboxHttpClient, and the answers must be equal
after normalising only the scratch roots and timestamps. Where boxd deliberately differs (confinement,
nested create_directory, move onto an existing file) the test says what each side does.
"""
import os
import pathlib
import re

import pytest

from conftest import ROOT, Boxd

REFERENCE_JS = (ROOT / "tests/reference-fs/node_modules/@modelcontextprotocol/server-filesystem"
                / "dist/index.js")


def build_tree(root: pathlib.Path):
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "hello.txt").write_text("hello\nworld\n")
    (root / "no-newline.txt").write_text("first\nsecond")
    (root / "sub" / "a.txt").write_text("alpha\n")
    (root / "sub" / "deeper" / "B.log").write_text("bravo\n")
    (root / "sub" / "deeper" / "notes.md").write_text("# notes\n")
    (root / "code.py").write_text(
        "def main():\n        value = compute(1)\n        print(value)\n\n\nmain()\n")
    (root / "crlf.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    (root / "link-to-sub").symlink_to("sub")
    (root / "long.txt").write_text("".join(f"line {n}\n" for n in range(1, 41)))


@pytest.fixture
def pair(tmp_path):
    """(call, normalise) where call(tool, args) -> (reference answer, boxd answer)."""
    base = tmp_path.resolve()
    reference_root, boxd_root = base / "reference", base / "boxd"
    for root in (reference_root, boxd_root):
        root.mkdir()
        build_tree(root)
        # Outside both roots, but sharing their string prefix; and a symlink that leads out.
        sibling = pathlib.Path(f"{root}-sibling")
        sibling.mkdir()
        (sibling / "secret.txt").write_text("sibling secret\n")
        (root / "escape").symlink_to(sibling / "secret.txt")
    server = Boxd(boxd_root)
    with server.client() as client:
        added = client.add_mcp_servers({"mcpServers": {"reference": {
            "command": "sh",
            "args": ["-c", 'cd "$1" && exec node "$2" "$1"', "sh",
                     str(reference_root), str(REFERENCE_JS)],
        }}})
        assert added == "OK", added

        def call(tool, arguments):
            reference = client.call_tool(f"reference__{tool}", arguments)
            native = client.call_tool(tool, arguments)
            return (normalise(reference, reference_root), normalise(native, boxd_root))

        yield call, reference_root, boxd_root, client
    server.stop()


DATE = re.compile(r"^(created|modified|accessed): .*$", re.M)


def normalise(answer, root: pathlib.Path):
    assert set(answer) >= {"content", "isError"}, answer
    texts = [item["text"] for item in answer["content"]]
    texts = [DATE.sub(r"\1: <date>", text.replace(str(root), "<root>")) for text in texts]
    return {"isError": bool(answer["isError"]), "texts": texts}


def rel(root, name):
    return str(root / name)


# Calls whose answers must be equal. Paths: "@/" is replaced by each side's own root.
SCRIPT = [
    ("list_allowed_directories", {}),
    ("read_file", {"path": "hello.txt"}),
    ("read_file", {"path": "@/sub/a.txt"}),
    ("read_file", {"path": "@/link-to-sub/a.txt"}),
    ("read_file", {"path": "@/missing.txt"}),
    ("read_file", {"path": "@/sub"}),
    ("read_file", {"path": "@/no/such/dir/file"}),
    ("read_file", {"path": "/etc/passwd"}),
    ("read_file", {"path": "@/../outside.txt"}),
    ("read_file", {}),
    ("read_file", {"path": 7}),
    ("read_multiple_files", {"paths": ["hello.txt", "@/missing.txt", "@/sub/a.txt", "/etc/hostname"]}),
    ("read_multiple_files", {"paths": "hello.txt"}),
    ("write_file", {"path": "@/new.txt", "content": "brand new\n"}),
    ("read_file", {"path": "@/new.txt"}),
    ("write_file", {"path": "hello.txt", "content": "replaced\n"}),
    ("read_file", {"path": "hello.txt"}),
    ("write_file", {"path": "@/sub", "content": "x"}),
    ("write_file", {"path": "@/no/parent/x.txt", "content": "x"}),
    ("write_file", {"path": "/tmp/boxd-should-not-exist.txt", "content": "x"}),
    ("write_file", {"path": "@/x.txt"}),
    ("edit_file", {"path": "@/sub/a.txt", "edits": [{"oldText": "alpha", "newText": "ALPHA"}]}),
    ("read_file", {"path": "@/sub/a.txt"}),
    ("edit_file", {"path": "@/code.py", "edits": [
        {"oldText": "value = compute(1)\n  print(value)", "newText": "result = compute(2)\n    print(result)"}]}),
    ("read_file", {"path": "@/code.py"}),
    ("edit_file", {"path": "@/no-newline.txt", "dryRun": True,
                   "edits": [{"oldText": "second", "newText": "2nd\nthird"}]}),
    ("read_file", {"path": "@/no-newline.txt"}),
    ("edit_file", {"path": "@/crlf.txt", "edits": [{"oldText": "two\r\n", "newText": "TWO\n"},
                                                   {"oldText": "one", "newText": "ONE"}]}),
    ("read_file", {"path": "@/crlf.txt"}),
    ("edit_file", {"path": "hello.txt", "edits": [{"oldText": "replaced", "newText": "x"},
                                                  {"oldText": "not there", "newText": "y"}]}),
    ("read_file", {"path": "hello.txt"}),
    ("edit_file", {"path": "@/long.txt", "edits": [
        {"oldText": "line 2\n", "newText": "line two\n"},
        {"oldText": "line 9\n", "newText": ""},
        {"oldText": "line 33\nline 34", "newText": "x\ny\nz"},
        {"oldText": "line 40\n", "newText": "line 40"}]}),
    ("edit_file", {"path": "@/long.txt", "dryRun": True, "edits": [
        {"oldText": "  line 20\n line 21  ", "newText": "  twenty\n"}]}),
    ("edit_file", {"path": "@/missing.txt", "edits": []}),
    ("edit_file", {"path": "@/sub/a.txt", "edits": [{"oldText": 1}], "dryRun": "yes"}),
    ("create_directory", {"path": "@/made"}),
    ("create_directory", {"path": "@/made"}),
    ("create_directory", {"path": "@/hello.txt"}),
    ("list_directory", {"path": "@"}),
    ("list_directory", {"path": "sub"}),
    ("list_directory", {"path": "@/hello.txt"}),
    ("list_directory", {"path": "@/missing"}),
    ("directory_tree", {"path": "@"}),
    ("directory_tree", {"path": "@/empty"}),
    ("move_file", {"source": "@/new.txt", "destination": "@/sub/moved.txt"}),
    ("move_file", {"source": "@/sub/moved.txt", "destination": "@/renamed.txt"}),
    ("move_file", {"source": "@/missing.txt", "destination": "@/m2.txt"}),
    ("move_file", {"source": "@/renamed.txt", "destination": "/tmp/boxd-moved.txt"}),
    ("list_directory", {"path": "@/sub"}),
    ("search_files", {"path": "@", "pattern": "A"}),
    ("search_files", {"path": "@", "pattern": "a", "excludePatterns": ["deeper"]}),
    ("search_files", {"path": "@", "pattern": "t", "excludePatterns": ["*.txt", "**/*.md"]}),
    ("search_files", {"path": "@", "pattern": "zzz"}),
    ("get_file_info", {"path": "@/hello.txt"}),
    ("get_file_info", {"path": "@/sub"}),
    ("get_file_info", {"path": "@/missing"}),
    # Edge cases: unicode names and content, empty files and lists, first-occurrence edits, paths through a
    # file, unknown extra arguments, missing roots for tree and search.
    ("write_file", {"path": "@/ünï côde ✓.txt", "content": "naïve — 日本語 🙂\n"}),
    ("read_file", {"path": "@/ünï côde ✓.txt"}),
    ("write_file", {"path": "@/empty.txt", "content": ""}),
    ("read_file", {"path": "@/empty.txt"}),
    ("get_file_info", {"path": "@/empty.txt"}),
    ("read_multiple_files", {"paths": []}),
    ("write_file", {"path": "@/twice.txt", "content": "dup\ndup\n"}),
    ("edit_file", {"path": "@/twice.txt", "edits": [{"oldText": "dup", "newText": "once"}]}),
    ("edit_file", {"path": "@/twice.txt", "edits": [{"oldText": "", "newText": "top\n"}]}),
    ("read_file", {"path": "@/twice.txt"}),
    ("edit_file", {"path": "@/ünï côde ✓.txt", "edits": [{"oldText": "日本語", "newText": "にほんご"}]}),
    ("create_directory", {"path": "@/hello.txt/sub"}),
    ("create_directory", {"path": "@/made/ünï"}),
    ("move_file", {"source": "@/made", "destination": "@/sub/made-moved"}),
    ("list_directory", {"path": "@/empty"}),
    ("list_directory", {"path": "@/sub"}),
    ("directory_tree", {"path": "@/sub"}),
    ("directory_tree", {"path": "@/missing"}),
    ("directory_tree", {"path": "@/hello.txt"}),
    ("search_files", {"path": "@/missing", "pattern": "a"}),
    ("search_files", {"path": "@", "pattern": "MADE"}),
    ("search_files", {"path": "@", "pattern": "ünï"}),
    ("get_file_info", {"path": "@/link-to-sub"}),
    ("read_file", {"path": "hello.txt", "extra": 1}),
    ("list_allowed_directories", {"unexpected": True}),
]


def with_root(arguments, root):
    def swap(value):
        if isinstance(value, str) and (value == "@" or value.startswith("@/")):
            return str(root) + value[1:]
        if isinstance(value, list):
            return [swap(item) for item in value]
        if isinstance(value, dict):
            return {key: swap(item) for key, item in value.items()}
        return value
    return swap(arguments)


def test_native_tools_answer_as_the_reference_does(pair):
    call, reference_root, boxd_root, client = pair
    reference_tools = client.list_tools(tool_type="reference")["reference"]
    native_tools = client.list_tools(tool_type="filesystem")["filesystem"]
    assert {name.removeprefix("reference__") for name in reference_tools} == set(native_tools)
    assert len(native_tools) == 11
    for name, spec in native_tools.items():
        reference_spec = reference_tools[f"reference__{name}"]["json_schema"]["function"]
        assert spec["json_schema"]["function"]["parameters"] == reference_spec["parameters"], name
        assert spec["json_schema"]["function"]["description"] == reference_spec["description"], name

    mismatches = []
    for step, (tool, arguments) in enumerate(SCRIPT):
        reference = client.call_tool(f"reference__{tool}", with_root(arguments, reference_root))
        native = client.call_tool(tool, with_root(arguments, boxd_root))
        reference, native = normalise(reference, reference_root), normalise(native, boxd_root)
        if reference != native:
            mismatches.append(f"step {step} {tool} {arguments}:\n  reference: {reference}\n"
                              f"  boxd:      {native}")
    assert not mismatches, "\n".join(mismatches)
    assert not pathlib.Path("/tmp/boxd-should-not-exist.txt").exists()
    assert not pathlib.Path("/tmp/boxd-moved.txt").exists()


def test_where_boxd_deliberately_differs(pair):
    call, reference_root, boxd_root, client = pair
    denied = "Error: Access denied - path outside allowed directories: "

    # A symlink leading out: the reference reads through it (CVE-2025-53109); boxd refuses.
    reference, native = call("read_file", {"path": "escape"})
    assert reference == {"isError": False, "texts": ["sibling secret\n"]}
    assert native["isError"] and native["texts"][0].startswith(denied)

    # A sibling sharing the root's string prefix: the reference accepts it (CVE-2025-53110); boxd refuses.
    for root, expect_reference in ((reference_root, True), (boxd_root, False)):
        answer = client.call_tool(
            "reference__read_file" if expect_reference else "read_file",
            {"path": f"{root}-sibling/secret.txt"})
        if expect_reference:
            assert answer["content"][0]["text"] == "sibling secret\n"
        else:
            assert answer["isError"] and answer["content"][0]["text"].startswith(denied)
    answer = client.call_tool("write_file", {"path": "escape", "content": "overwritten"})
    assert answer["isError"]
    assert pathlib.Path(f"{boxd_root}-sibling/secret.txt").read_text() == "sibling secret\n"

    # create_directory promises nested levels; the reference makes one level only.
    reference, native = call("create_directory", {"path": "x/y/z"})
    assert reference["isError"] and "Parent directory does not exist" in reference["texts"][0]
    assert native == {"isError": False, "texts": ["Successfully created directory x/y/z"]}
    assert (boxd_root / "x/y/z").is_dir()

    # move_file promises to fail onto an existing destination; the reference overwrites it.
    reference, native = call("move_file", {"source": "hello.txt", "destination": "sub/a.txt"})
    assert reference == {"isError": False,
                         "texts": ["Successfully moved hello.txt to sub/a.txt"]}
    assert native["isError"]
    assert native["texts"][0].startswith("Error: EEXIST: file already exists, rename ")
    assert (boxd_root / "hello.txt").read_text() == "hello\nworld\n"
    assert (boxd_root / "sub/a.txt").read_text() == "alpha\n"

    # edit_file on bytes that are not UTF-8: the reference rewrites them lossily; boxd refuses.
    for root in (reference_root, boxd_root):
        (root / "blob.bin").write_bytes(b"key=\xff\xfe\n")
    reference, native = call("edit_file", {"path": "blob.bin", "edits": [
        {"oldText": "key", "newText": "KEY"}]})
    assert not reference["isError"]
    assert (reference_root / "blob.bin").read_bytes() != b"KEY=\xff\xfe\n"
    assert native == {"isError": True,
                      "texts": ["Error: blob.bin is not UTF-8 text; edit_file would corrupt it"]}
    assert (boxd_root / "blob.bin").read_bytes() == b"key=\xff\xfe\n"


def test_allow_dir_and_tool_families(tmp_path):
    workspace, extra = tmp_path / "ws", tmp_path / "extra"
    workspace.mkdir()
    extra.mkdir()
    (extra / "data.txt").write_text("extra data\n")
    server = Boxd(workspace, "--allow-dir", str(extra), "--tools", "filesystem")
    try:
        with server.client() as client:
            listing = client.call_tool("list_allowed_directories", {})
            assert listing["content"][0]["text"] == \
                f"Allowed directories:\n{workspace}\n{extra}"
            read = client.call_tool("read_file", {"path": str(extra / "data.txt")})
            assert read["content"][0]["text"] == "extra data\n"
            assert client.list_tools(tool_type="filesystem")["filesystem"]
            shell = client.call_tool("run_shell_command", {"command": "true"})
            assert shell["isError"] is True
    finally:
        server.stop()


def random_edit_cases(count, seed=7):
    """Files over a tiny alphabet (many equal lines, so many equally short diffs) and one edit each."""
    import random
    rng = random.Random(seed)
    words = ["a", "b", "dup", "", "x y", "  indented"]
    for _ in range(count):
        lines = [rng.choice(words) for _ in range(rng.randint(0, 40))]
        content = "\n".join(lines) + ("\n" if lines and rng.random() < 0.7 else "")
        if not content:
            content = rng.choice(["", "a", "a\n"])
        start = rng.randint(0, len(content))
        old_text = content[start:start + rng.randint(0, 30)]
        new_lines = [rng.choice(words) for _ in range(rng.randint(0, 6))]
        new_text = "\n".join(new_lines) + ("\n" if rng.random() < 0.5 else "")
        yield content, old_text, new_text


def test_edit_patches_equal_the_reference_on_random_edits(pair):
    """jsdiff picks among equally short diffs by its own rule; boxd's patches must pick the same."""
    call, reference_root, boxd_root, client = pair
    mismatches, cases = [], 0
    for content, old_text, new_text in random_edit_cases(150):
        for root in (reference_root, boxd_root):
            (root / "random.txt").write_text(content)
        reference, native = call("edit_file", {
            "path": "random.txt", "dryRun": True,
            "edits": [{"oldText": old_text, "newText": new_text}]})
        cases += 1
        if reference != native:
            mismatches.append(f"{content!r} {old_text!r} -> {new_text!r}:\n  reference: {reference}\n"
                              f"  boxd:      {native}")
    assert cases == 150
    assert not mismatches, f"{len(mismatches)} of {cases} differ:\n" + "\n".join(mismatches[:5])
