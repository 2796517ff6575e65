"""Issue #33's isolation checks, run from inside a sandbox as tenant code: the token is in no process's
environment or argv and in no file (less /proc and /sys), and neither boxd process (`boxd init`, PID 1,
and `boxd serve`) lets tenant code open its /proc/<pid>/mem.

The scan is a Python script written into the mounted workspace, with the token in a pattern file beside
it: the token is never on a command line (a /proc scan would find the scanner itself) and the pattern's
directory is left out of the file-system search. Each scan writes LABEL.json next to them.

Used by test_images.py (base and gui: a shell command, an IPython cell, a hosted MCP server, a desktop
xterm) and
test_base_image.py (the container started without SECRET_TOKEN).
"""
import json
import pathlib
import shutil
import time

SCAN_DIR = ".isolation-scan"  # under the workspace; its name is excluded from the file-system search
FS_SEARCH_LIMIT = 40  # seconds; the scan from a shell command or a cell must end within boxd's 55 s

SCAN = r'''
import errno, json, os, subprocess, sys, time

HERE = "/workspace/%(dir)s"
GONE = (errno.ENOENT, errno.ESRCH)


def main(label):
    pattern = os.path.join(HERE, "pattern")
    with open(pattern, "rb") as f:
        token = f.read().strip()
    report = {"label": label, "scanner": os.getpid(), "proc_hits": [], "unreadable": {}, "read": 0,
              "boxd": {}, "mem": {}}
    for name in sorted(os.listdir("/proc"), key=lambda n: (len(n), n)):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue  # gone
        for what in ("environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{what}", "rb") as f:
                    data = f.read()
            except OSError as error:
                if error.errno not in GONE:
                    report["unreadable"].setdefault(f"{pid} {comm}", []).append(f"{what}: {error.strerror}")
                continue
            report["read"] += 1
            if token in data:
                report["proc_hits"].append(f"/proc/{pid}/{what} ({comm})")
        if comm == "boxd":
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    report["boxd"][str(pid)] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                report["boxd"][str(pid)] = "?"
            try:
                with open(f"/proc/{pid}/mem", "rb") as f:
                    f.seek(0)
                report["mem"][str(pid)] = "opened"
            except OSError as error:
                report["mem"][str(pid)] = error.strerror
    # The control: the same open works on a dumpable process (this one), so a refusal above is boxd's.
    try:
        with open("/proc/self/mem", "rb"):
            report["mem_self"] = "opened"
    except OSError as error:
        report["mem_self"] = error.strerror
    roots = [os.path.join("/", name) for name in sorted(os.listdir("/"))
             if name not in ("proc", "sys") and not os.path.islink(os.path.join("/", name))]
    started = time.monotonic()
    done = subprocess.run(["timeout", "%(limit)d", "grep", "-rlF", "-D", "skip", "--exclude-dir=%(dir)s",
                           "-f", pattern, *roots], capture_output=True, text=True)
    report["fs_seconds"] = round(time.monotonic() - started, 2)
    report["fs_roots"] = roots
    report["fs_hits"] = done.stdout.split("\n")[:-1]
    report["fs_status"] = done.returncode  # 1: nothing found; 0: found; 2: a read error; 124: timed out
    report["fs_errors"] = done.stderr.splitlines()[:20]
    # The control: the same search over the scan's own directory finds the pattern file.
    control = subprocess.run(["grep", "-rlF", "-D", "skip", "-f", pattern, HERE], capture_output=True, text=True)
    report["fs_control"] = control.stdout.split("\n")[:-1]
    with open(os.path.join(HERE, label + ".json.part"), "w") as f:
        json.dump(report, f)
    os.rename(os.path.join(HERE, label + ".json.part"), os.path.join(HERE, label + ".json"))
    print("scan", label, "done")


if __name__ == "__main__":
    main(sys.argv[1])
''' % {"dir": SCAN_DIR, "limit": FS_SEARCH_LIMIT}

# A hosted MCP server (stdio, newline-delimited JSON-RPC, as MCP's stdio transport frames it) whose one
# tool runs the scan from the server's own process: what a user's MCP server started by boxd can reach.
# No SDK: the image's Python has none, and the server needs only initialize, tools/list and tools/call.
MCP_SERVER = r'''
import json, runpy, sys

TOOL = {"name": "isolation_scan", "description": "Scans for the token from this server's process.",
        "inputSchema": {"type": "object", "properties": {}}}


def answer(request_id, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    message = json.loads(line)
    method, request_id = message.get("method"), message.get("id")
    if request_id is None:
        continue  # a notification (initialized, cancelled)
    if method == "initialize":
        answer(request_id, {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                            "serverInfo": {"name": "isolation-scan", "version": "1"}})
    elif method == "tools/list":
        answer(request_id, {"tools": [TOOL]})
    elif method == "tools/call":
        runpy.run_path(__file__.replace("mcp_server.py", "scan.py"))["main"]("mcp")
        answer(request_id, {"content": [{"type": "text", "text": "scan mcp done"}], "isError": False})
    else:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id,
                                     "error": {"code": -32601, "message": method}}) + "\n")
        sys.stdout.flush()
'''

# What tenant code types or sends: the script's path only, never the token.
SHELL_COMMAND = f"python3 /workspace/{SCAN_DIR}/scan.py shell"
CELL = (f"import runpy\nrunpy.run_path('/workspace/{SCAN_DIR}/scan.py')['main']('cell')")
XTERM_COMMAND = f"python3 /workspace/{SCAN_DIR}/scan.py xterm"


def prepare(workspace, token):
    """Writes the scanner and the pattern file into the host side of the mounted workspace."""
    directory = pathlib.Path(workspace) / SCAN_DIR
    directory.mkdir(exist_ok=True)
    (directory / "scan.py").write_text(SCAN)
    (directory / "mcp_server.py").write_text(MCP_SERVER)
    (directory / "pattern").write_text(token + "\n")  # one line: an empty pattern line would match all
    for old in directory.glob("*.json"):
        old.unlink()
    return directory


def cleanup(workspace):
    shutil.rmtree(pathlib.Path(workspace) / SCAN_DIR, ignore_errors=True)


def wait_report(workspace, label, timeout=120):
    path = pathlib.Path(workspace) / SCAN_DIR / f"{label}.json"
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"the {label} scan wrote no report within {timeout} s"
        time.sleep(0.1)
    return json.loads(path.read_text())


def check(report, expect_init=True):
    """Nothing found; the only unreadable /proc entries are boxd's; both boxd processes refuse /mem."""
    label = report["label"]
    assert report["read"] >= 4, report  # the scan did see the processes (its own, its shell, boxd argv)
    assert not report["proc_hits"], f"{label}: the token in {report['proc_hits']}"
    assert report["fs_status"] == 1, (f"{label}: file-system search status {report['fs_status']}: hits "
                                      f"{report['fs_hits']}, errors {report['fs_errors']}")
    assert not report["fs_hits"], f"{label}: the token in the files {report['fs_hits']}"
    assert f"/workspace/{SCAN_DIR}/pattern" in report["fs_control"], f"{label}: the control found {report['fs_control']}"
    boxd = report["boxd"]
    serve = [pid for pid, argv in boxd.items() if " serve" in argv or argv == "?"]
    if expect_init:
        assert "1" in boxd, f"{label}: PID 1 is not boxd: {boxd}"
    assert len(boxd) >= (2 if expect_init else 1) and serve, f"{label}: boxd processes {boxd}"
    assert report["mem_self"] == "opened", report["mem_self"]
    for pid in boxd:
        assert report["mem"][pid] == "Permission denied", f"{label}: /proc/{pid}/mem: {report['mem'][pid]}"
    strangers = [key for key in report["unreadable"] if not key.endswith(" boxd")]
    assert not strangers, f"{label}: unreadable for reasons other than boxd's: {report['unreadable']}"
    return (f"{label}: {report['read']} /proc environ+cmdline read, no token; file system "
            f"({len(report['fs_roots'])} roots) searched in {report['fs_seconds']:.1f} s, no token; "
            f"/proc/<pid>/mem of boxd {sorted(boxd, key=int)} refused (own: opened)")


def scan_shell(client, workspace):
    result = client.run_shell_command(SHELL_COMMAND)
    out = {item.get("description"): item.get("text") for item in result["content"]}
    assert out.get("returncode") in ("0", 0), result
    return wait_report(workspace, "shell", timeout=5)


def scan_cell(client, workspace):
    result = client.run_ipython_cell(CELL)
    assert "scan cell done" in json.dumps(result), result
    return wait_report(workspace, "cell", timeout=5)


def scan_mcp_server(client, workspace):
    """The scan from a hosted MCP server's process: boxd starts it as it starts a user's server."""
    added = client.add_mcp_servers({"mcpServers": {
        "isolation": {"command": "python3", "args": [f"/workspace/{SCAN_DIR}/mcp_server.py"]},
    }})
    assert added == "OK", added
    result = client.call_tool("isolation_scan", {})
    assert result.get("isError") is False and "scan mcp done" in json.dumps(result), result
    return wait_report(workspace, "mcp", timeout=5)
