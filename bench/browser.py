"""The `browser` family: boxd's native tools against the reference Node server (@playwright/mcp 0.0.25 from npm,
hosted through a second boxd's MCP hosting, as upstream's image hosts it), both on Debian's headless chromium,
against the same loopback page served by this script, in one run.

Prints one table (action, reference p50/p95, boxd p50/p95, ratio of p50s), the memory of each side before and
after a browser is open (the server's own RSS; the proportional set size of its node helper and of Chromium's
processes, summed apart), and writes
bench-out/browser.json. Every loop is bounded in count and time; only loopback is used.
"""
import argparse
import functools
import http.server
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from family_bench import OUT, ROOT, Boxd, memory_summary, samples

REFERENCE = OUT / "reference-browser" / "node_modules" / "@playwright" / "mcp" / "cli.js"
PAGES = ROOT / "tests" / "browser"
CHROMIUM = "/usr/bin/chromium"


def big_page(rows=1000):
    """10 000 elements: `rows` rows of ten (a wrapper, a heading, a paragraph with a span, a link, a button,
    a field, a list of two items)."""
    body = "".join(
        f'<div class="row"><h3>Row {n}</h3><p>Some text for row {n} <span>detail {n}</span></p>'
        f'<a href="#row-{n}">Link {n}</a><button data-n="{n}">Button {n}</button>'
        f'<input aria-label="Field {n}"><ul><li>first {n}</li><li>second {n}</li></ul></div>'
        for n in range(rows))
    return f"<!doctype html><html><head><title>Big</title></head><body>{body}</body></html>".encode()


BIG_PAGE = "/big-10000.html"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """The pages of tests/browser, and BIG_PAGE (made here: 10 000 elements)."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path != BIG_PAGE:
            return super().do_GET()
        body = big_page()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def serve_pages():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(QuietHandler, directory=str(PAGES)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def rss_kib(pid):
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def pss_kib(pid):
    # Chromium's processes share most of their pages; summing their RSS would count those once per process.
    try:
        for line in pathlib.Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def process_tree():
    """pid -> (parent pid, command name) for every process visible now."""
    tree = {}
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is parenthesised and may hold spaces; the fields after it are fixed.
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        parent = int(stat[stat.rindex(")") + 2:].split()[1])
        tree[int(entry.name)] = (parent, name)
    return tree


def memory(root_pid):
    """RSS of the server process; PSS summed over its non-Chromium descendants (the reference's node) and over
    Chromium's processes."""
    tree = process_tree()
    children = {}
    for pid, (parent, _) in tree.items():
        children.setdefault(parent, []).append(pid)
    helpers, chromium, stack = 0, 0, list(children.get(root_pid, []))
    for _ in range(10_000):
        if not stack:
            break
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        if "chrom" in tree[pid][1]:
            chromium += pss_kib(pid)
        else:
            helpers += pss_kib(pid)
    return {"server_mib": rss_kib(root_pid) / 1024, "helpers_mib": helpers / 1024, "chromium_mib": chromium / 1024}


def tool(server, name, arguments):
    """The text items of a tool's result."""
    result = server.call(name, arguments)
    return "\n".join(item.get("text", "") for item in result.get("content", []) if item.get("type") == "text")


def ref(answer, role, name):
    match = re.search(rf'- {role} "{re.escape(name)}"[^\n]*\[ref=(\w+)\]', answer)
    if not match:
        raise RuntimeError(f"no {role} {name!r} in:\n{answer[:2000]}")
    return match.group(1)


# Each row is measured in this many alternating rounds of the two servers, so a slow or fast spell of the
# machine falls on both sides instead of on whichever ran in it.
ROUNDS = 3


def interleaved(servers, call, count, budget_seconds):
    """p50/p95 per server of `call(server)`, `count` calls each, in alternating rounds."""
    taken = {name: [] for name in servers}
    for _ in range(ROUNDS):
        for name, server in servers.items():
            taken[name].extend(samples(lambda: call(server), max(1, count // ROUNDS), budget_seconds / ROUNDS))
    rows = {}
    for name, values in taken.items():
        values.sort()
        rows[name] = {"p50_ms": statistics.median(values) * 1000,
                      "p95_ms": values[min(len(values) - 1, int(len(values) * 0.95))] * 1000, "n": len(values)}
    return rows


def workload(servers, site, only=None):
    """Every row (or those of `only`) for both servers (name -> server): results[name][row]."""
    page = f"{site}/form.html"
    results = {name: {} for name in servers}
    for name, server in servers.items():
        started = time.perf_counter()
        first = tool(server, "browser_navigate", {"url": page})
        results[name]["first_navigate"] = {"ms": (time.perf_counter() - started) * 1000}
        if "Test form" not in first:
            raise RuntimeError(f"unexpected first page on {name}:\n{first[:2000]}")

    def navigate_and_snapshot(server):
        tool(server, "browser_navigate", {"url": page})
        tool(server, "browser_snapshot", {})

    def row(label, call, count, budget):
        if only is not None and label not in only:
            return
        for name, figures in interleaved(servers, call, count, budget).items():
            results[name][label] = figures

    big_rows(servers, site, row, results, only)
    if only is not None and not set(only) & set(ROWS[:6]):
        return results
    row("navigate+snapshot", navigate_and_snapshot, 30, 60)
    row("snapshot", lambda server: tool(server, "browser_snapshot", {}), 30, 60)
    refs = {}
    for name, server in servers.items():
        snapshot = tool(server, "browser_snapshot", {})
        refs[id(server)] = (ref(snapshot, "button", "Show"), ref(snapshot, "textbox", "Name"))
    row("click", lambda server: tool(server, "browser_click",
                                     {"element": "Show button", "ref": refs[id(server)][0]}), 30, 60)
    # A click that changes nothing on the page (it focuses a field): answered as soon as that is known.
    row("click (no change)", lambda server: tool(server, "browser_click",
                                                 {"element": "Name field", "ref": refs[id(server)][1]}), 30, 60)
    row("type", lambda server: tool(server, "browser_type",
                                    {"element": "Name field", "ref": refs[id(server)][1], "text": "hello"}), 30, 60)
    row("take_screenshot", lambda server: tool(server, "browser_take_screenshot", {}), 15, 60)
    return results


BIG = "snapshot, 10 000 elements"
BIG_BUDGET = "same, interactive 2k tok"
ROWS = ["navigate+snapshot", "snapshot", "click", "click (no change)", "type", "take_screenshot", BIG, BIG_BUDGET]
# boxd's own arguments on the 10 000-element page: interactive elements only, within 2 000 tokens. The
# reference has no such arguments: its row is its whole snapshot, the only one it gives.
BUDGET = {"interactive": True, "max_tokens": 2000}


def big_rows(servers, site, row, results, only):
    """The 10 000-element page's snapshot, whole and (boxd) interactive within 2 000 tokens, with the size of
    each answer."""
    if only is not None and not {BIG, BIG_BUDGET} & set(only):
        return
    for name, server in servers.items():
        tool(server, "browser_navigate", {"url": f"{site}{BIG_PAGE}"})
        whole = tool(server, "browser_snapshot", {})
        budgeted = tool(server, "browser_snapshot", BUDGET if name == "boxd" else {})
        if "Button 0" not in whole or "Button 0" not in budgeted:
            raise RuntimeError(f"unexpected big page on {name}:\n{whole[:2000]}")
        results[name]["big_answer_chars"] = {BIG: len(whole), BIG_BUDGET: len(budgeted)}
    row(BIG, lambda server: tool(server, "browser_snapshot", {}), 15, 120)
    row(BIG_BUDGET, lambda server: tool(server, "browser_snapshot", BUDGET if server is servers.get("boxd") else {}),
        15, 120)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--boxd", default=str(ROOT / "target" / "release" / "boxd"))
    # boxd runs Debian's chromium-headless-shell when it is installed (as Playwright runs its own
    # headless shell); the reference is given /usr/bin/chromium as upstream's image does, or this.
    parser.add_argument("--reference-chromium", default=CHROMIUM)
    # As the browser image runs it: both sides headed, on /usr/bin/chromium, on an Xvfb display.
    parser.add_argument("--headed", action="store_true")
    # Only these rows (e.g. --rows "snapshot, 10 000 elements;same, interactive 2k tok"); all by default.
    parser.add_argument("--rows", help="rows to run, separated by ';'")
    args = parser.parse_args()
    xvfb = start_xvfb() if args.headed else None
    try:
        run(args)
    finally:
        if xvfb:
            xvfb.terminate()
            xvfb.wait(timeout=10)


def start_xvfb():
    """Xvfb on the first free display from :90; DISPLAY is set for both servers."""
    for number in range(90, 110):
        if os.path.exists(f"/tmp/.X11-unix/X{number}") or os.path.exists(f"/tmp/.X{number}-lock"):
            continue
        process = subprocess.Popen(["Xvfb", f":{number}", "-screen", "0", "1280x1024x24", "-nolisten", "tcp"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and process.poll() is None:
            if os.path.exists(f"/tmp/.X11-unix/X{number}"):
                os.environ["DISPLAY"] = f":{number}"
                return process
            time.sleep(0.05)
        process.kill()
    sys.exit("no Xvfb display could be started")


def run(args):
    if not REFERENCE.exists():
        sys.exit(f"missing {REFERENCE}: run bench/setup.sh")
    if not os.path.exists(args.reference_chromium):
        sys.exit(f"missing {args.reference_chromium}: apt-get install chromium")
    shell = shutil.which("chromium-headless-shell")
    if args.headed:
        print(f"headed on {os.environ['DISPLAY']}: both sides on {args.reference_chromium}")
    else:
        print(f"boxd's browser: {shell or 'chromium (no chromium-headless-shell on PATH)'}; "
              f"the reference's: {args.reference_chromium}")
    pages, site = serve_pages()
    config_dir = tempfile.mkdtemp(prefix="bench-browser-config-")
    config = pathlib.Path(config_dir) / "playwright-mcp.json"
    config.write_text(json.dumps({"browser": {"browserName": "chromium", "isolated": True, "launchOptions": {
        "executablePath": args.reference_chromium, "headless": not args.headed,
        # As root (containers), Chromium refuses to start with its sandbox; boxd passes --no-sandbox likewise.
        "chromiumSandbox": False}}}))
    if args.headed:
        native = Boxd(args.boxd, "--tools", "browser", "--browser-executable", args.reference_chromium)
    else:
        native = Boxd(args.boxd, "--tools", "browser", "--browser-headless")
    host = Boxd(args.boxd, "--tools", "mcp")
    results = {"memory": {}}
    try:
        results["memory"]["boxd_before"] = memory(native.proc.pid)
        host.request("/mcp/add_servers", {"server_configs": {"mcpServers": {"playwright": {
            "command": "node", "args": [str(REFERENCE), "--config", str(config)],
            "env": {"PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"}}}}})
        results["memory"]["reference_before"] = memory(host.proc.pid)
        only = args.rows.split(";") if args.rows else None
        results.update(workload({"reference": host, "boxd": native}, site, only))
        for name, server in (("reference", host), ("boxd", native)):
            results["memory"][f"{name}_after"] = memory(server.proc.pid)
        pss_by_part = memory_summary(native)
    finally:
        for process in (native, host):
            process.stop()
        pages.shutdown()
    OUT.mkdir(exist_ok=True)
    (OUT / ("browser-headed.json" if args.headed else "browser.json")).write_text(json.dumps(results, indent=2))
    print(f"{'browser action':<26} {'reference p50/p95 ms':>22} {'boxd p50/p95 ms':>18} {'ratio p50':>10}")
    ref_first, box_first = results["reference"]["first_navigate"]["ms"], results["boxd"]["first_navigate"]["ms"]
    print(f"{'first navigate':<26} {ref_first:>21.1f} {box_first:>18.1f} {box_first / ref_first:>10.3f}")
    for action in ROWS:
        if action not in results["boxd"]:
            continue
        ref_row, box = results["reference"][action], results["boxd"][action]
        print(f"{action:<26} {ref_row['p50_ms']:>10.1f} /{ref_row['p95_ms']:>9.1f}"
              f" {box['p50_ms']:>8.1f} /{box['p95_ms']:>7.1f} {box['p50_ms'] / ref_row['p50_ms']:>10.3f}")
    if "big_answer_chars" in results["boxd"]:
        print(f"{'answer characters':<26} {'reference':>22} {'boxd':>18}")
        for action in (BIG, BIG_BUDGET):
            print(f"{action:<26} {results['reference']['big_answer_chars'][action]:>22}"
                  f" {results['boxd']['big_answer_chars'][action]:>18}")
    print(f"{'memory MiB':<18} {'server RSS':>10} {'node PSS':>8} {'chromium PSS':>12}")
    for key, row in results["memory"].items():
        print(f"{key:<18} {row['server_mib']:>10.1f} {row['helpers_mib']:>8.1f} {row['chromium_mib']:>12.1f}")
    print(f"boxd's GET /memory after the workload, PSS MiB (processes): {pss_by_part}")


if __name__ == "__main__":
    main()
