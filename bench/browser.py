"""The `browser` family: boxd's native tools against the reference Node server (@playwright/mcp 0.0.25 from npm,
hosted through a second boxd's MCP hosting, as upstream's image hosts it) and against agent-browser (Vercel's CLI,
npm `agent-browser` 0.41.2: a native binary and its daemon), all on Debian's chromium (boxd on its headless shell
unless told otherwise), against the same loopback page served by this script, in one run.

Prints one table per other side (action, its p50/p95, boxd p50/p95, ratio of p50s), the memory of each side
before and after a browser is open (the server's own RSS; the proportional set size of its helpers and of
Chromium's processes, summed apart), the memory of 8 isolated sessions on each side, and writes
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
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from family_bench import OUT, ROOT, Boxd, memory_summary, samples

REFERENCE = OUT / "reference-browser" / "node_modules" / "@playwright" / "mcp" / "cli.js"
# The native binary the npm package carries (the package's node wrapper only spawns it, and a global install
# links it directly): one process per command, as agent-browser's users run it.
AGENT_BROWSER = OUT / "agent-browser" / "node_modules" / "agent-browser" / "bin" / "agent-browser-linux-x64"
PAGES = ROOT / "tests" / "browser"
CHROMIUM = "/usr/bin/chromium"
# boxd's viewport (upstream's browser image's); the other two are given the same.
VIEWPORT = (1024, 768)


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


def descendants(root_pid, tree):
    """(pid, command name) of every process under root_pid (not itself)."""
    children = {}
    for pid, (parent, _) in tree.items():
        children.setdefault(parent, []).append(pid)
    found, stack = [], list(children.get(root_pid, []))
    for _ in range(10_000):
        if not stack:
            break
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        found.append((pid, tree[pid][1]))
    return found


def memory(root_pid):
    """RSS of the server process; PSS summed over its non-Chromium descendants (the reference's node) and over
    Chromium's processes."""
    helpers, chromium = 0, 0
    for pid, name in descendants(root_pid, process_tree()):
        if "chrom" in name:
            chromium += pss_kib(pid)
        else:
            helpers += pss_kib(pid)
    return {"server_mib": rss_kib(root_pid) / 1024, "helpers_mib": helpers / 1024, "chromium_mib": chromium / 1024}


def tree_pss(roots, include_roots):
    """PSS of the process trees under `roots` (with the roots themselves when `include_roots`): MiB of the
    servers (the roots and their non-Chromium descendants), MiB of Chromium's processes, and the process count.
    Chromium's crash handlers leave its tree (their parent is init) and are not counted on any side."""
    tree = process_tree()
    servers, chromium, count = 0, 0, 0
    for root in roots:
        members = descendants(root, tree) + ([(root, tree.get(root, (0, ""))[1])] if include_roots else [])
        for pid, name in members:
            count += 1
            if "chrom" in name:
                chromium += pss_kib(pid)
            else:
                servers += pss_kib(pid)
    return {"server_mib": servers / 1024, "chromium_mib": chromium / 1024,
            "total_mib": (servers + chromium) / 1024, "processes": count}


def tool(server, name, arguments):
    """The text items of a tool's result."""
    result = server.call(name, arguments)
    return "\n".join(item.get("text", "") for item in result.get("content", []) if item.get("type") == "text")


def ref(answer, role, name):
    # The three sides write refs alike: `- button "Show" [ref=e4]` (agent-browser adds its `@` when acting).
    match = re.search(rf'- {role} "{re.escape(name)}"[^\n]*\[ref=(\w+)\]', answer)
    if not match:
        raise RuntimeError(f"no {role} {name!r} in:\n{answer[:2000]}")
    return match.group(1)


class AgentBrowser:
    """agent-browser's CLI with a scratch HOME (its daemons' sockets, pid files and user config live in
    ~/.agent-browser) and working directory (it reads ./agent-browser.json), on `chromium`. Each `--session`
    name is a daemon of its own with a browser of its own, started by the session's first command."""

    def __init__(self, binary, chromium, headed):
        self.binary = str(binary)
        self.home = tempfile.mkdtemp(prefix="bench-agent-browser-")
        self.env = {**os.environ, "HOME": self.home, "AGENT_BROWSER_EXECUTABLE_PATH": chromium,
                    # Its outdated-Chrome check fetches a Google blog; only loopback is used here.
                    "AGENT_BROWSER_NO_VERSION_CHECK": "1"}
        if headed:
            self.env["AGENT_BROWSER_HEADED"] = "1"
        self.shot = os.path.join(self.home, "shot.png")

    def run(self, session, *args, timeout=120):
        """The command's standard output; a failed command stops the bench."""
        done = subprocess.run([self.binary, "--session", session, *args], env=self.env, cwd=self.home,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"agent-browser {' '.join(args)} -> {done.returncode}: "
                               f"{(done.stderr or done.stdout)[:500]}")
        return done.stdout

    def daemons(self):
        """Session name -> pid of its running daemon."""
        found = {}
        for pid_file in pathlib.Path(self.home, ".agent-browser").glob("*.pid"):
            try:
                pid = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
            if pathlib.Path(f"/proc/{pid}").exists():
                found[pid_file.stem] = pid
        return found

    def stop(self):
        """Every session closed and its daemon gone (they are this bench's own, found by their pid files),
        so that the next measurement shares no page with them."""
        daemons = list(self.daemons().values())
        try:
            subprocess.run([self.binary, "close", "--all"], env=self.env, cwd=self.home, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=60)
        except subprocess.TimeoutExpired:
            pass
        # `close --all` ends the daemons after it answers; what has not ended within 10 s is ended here.
        for signal_number in (None, signal.SIGTERM, signal.SIGKILL):
            for pid in daemons if signal_number else ():
                try:
                    os.kill(pid, signal_number)
                except OSError:
                    pass
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(pathlib.Path(f"/proc/{pid}").exists() for pid in daemons):
                time.sleep(0.05)
            daemons = [pid for pid in daemons if pathlib.Path(f"/proc/{pid}").exists()]
            if not daemons:
                break
        shutil.rmtree(self.home, ignore_errors=True)


class McpSide:
    """boxd's browser tools, or the reference's through its host; `budget` is the snapshot's arguments for the
    budgeted row (the reference has none: its row is its whole snapshot, the only one it gives)."""

    def __init__(self, server, budget):
        self.server, self.budget = server, budget

    def navigate(self, url):
        return tool(self.server, "browser_navigate", {"url": url})

    def snapshot(self, budgeted=False):
        return tool(self.server, "browser_snapshot", self.budget if budgeted else {})

    def click(self, element, reference):
        return tool(self.server, "browser_click", {"element": element, "ref": reference})

    def type(self, element, reference, text):
        return tool(self.server, "browser_type", {"element": element, "ref": reference, "text": text})

    def screenshot(self):
        return tool(self.server, "browser_take_screenshot", {})


class AgentBrowserSide:
    """One agent-browser session driven as its users drive it: a CLI process per command, its daemon warm."""

    def __init__(self, cli, session):
        self.cli, self.session = cli, session

    def navigate(self, url):
        return self.cli.run(self.session, "open", url)

    def snapshot(self, budgeted=False):
        # Its own reductions: interactive elements only, empty structure removed; no size budget of its own
        # beyond --max-output's cut of the text.
        return self.cli.run(self.session, "snapshot", *(("-i", "-c") if budgeted else ()))

    def click(self, element, reference):
        return self.cli.run(self.session, "click", f"@{reference}")

    def type(self, element, reference, text):
        # `fill` (clear, then insert the text) is what boxd's and the reference's browser_type do when not
        # asked to type slowly; agent-browser's `type` sends a key event per character.
        return self.cli.run(self.session, "fill", f"@{reference}", text)

    def screenshot(self):
        return self.cli.run(self.session, "screenshot", self.cli.shot)


# Each row is measured in this many alternating rounds of the servers, so a slow or fast spell of the
# machine falls on every side instead of on whichever ran in it.
ROUNDS = 3


def interleaved(sides, call, count, budget_seconds):
    """p50/p95 per side of `call(side)`, `count` calls each, in alternating rounds."""
    taken = {name: [] for name in sides}
    for _ in range(ROUNDS):
        for name, side in sides.items():
            taken[name].extend(samples(lambda: call(side), max(1, count // ROUNDS), budget_seconds / ROUNDS))
    rows = {}
    for name, values in taken.items():
        values.sort()
        rows[name] = {"p50_ms": statistics.median(values) * 1000,
                      "p95_ms": values[min(len(values) - 1, int(len(values) * 0.95))] * 1000, "n": len(values)}
    return rows


def workload(sides, site, only=None):
    """Every row (or those of `only`) for every side (name -> side): results[name][row]."""
    page = f"{site}/form.html"
    results = {name: {} for name in sides}
    for name, side in sides.items():
        started = time.perf_counter()
        side.navigate(page)
        results[name]["first_navigate"] = {"ms": (time.perf_counter() - started) * 1000}
        first = side.snapshot()
        if "Test form" not in first:
            raise RuntimeError(f"unexpected first page on {name}:\n{first[:2000]}")

    def navigate_and_snapshot(side):
        side.navigate(page)
        side.snapshot()

    def row(label, call, count, budget):
        if only is not None and label not in only:
            return
        for name, figures in interleaved(sides, call, count, budget).items():
            results[name][label] = figures

    big_rows(sides, site, row, results, only)
    if only is not None and not set(only) & set(ROWS[:6]):
        return results
    row("navigate+snapshot", navigate_and_snapshot, 30, 60)
    row("snapshot", lambda side: side.snapshot(), 30, 60)
    refs = {}
    for name, side in sides.items():
        # Back on the form (a pick of rows may have skipped navigate+snapshot after the big page).
        side.navigate(page)
        snapshot = side.snapshot()
        refs[name] = (ref(snapshot, "button", "Show"), ref(snapshot, "textbox", "Name"))
    by_side = {id(side): refs[name] for name, side in sides.items()}
    row("click", lambda side: side.click("Show button", by_side[id(side)][0]), 30, 60)
    # A click that changes nothing on the page (it focuses a field): answered as soon as that is known.
    row("click (no change)", lambda side: side.click("Name field", by_side[id(side)][1]), 30, 60)
    row("type", lambda side: side.type("Name field", by_side[id(side)][1], "hello"), 30, 60)
    row("take_screenshot", lambda side: side.screenshot(), 15, 60)
    return results


BIG = "snapshot, 10 000 elements"
BIG_BUDGET = "same, interactive 2k tok"
SESSIONS = "8 sessions' memory"
ROWS = ["navigate+snapshot", "snapshot", "click", "click (no change)", "type", "take_screenshot", BIG, BIG_BUDGET]
# boxd's own arguments on the 10 000-element page: interactive elements only, within 2 000 tokens.
BUDGET = {"interactive": True, "max_tokens": 2000}
SESSION_COUNT = 8


def big_rows(sides, site, row, results, only):
    """The 10 000-element page's snapshot, whole and (boxd, agent-browser) reduced, with the size of each
    answer."""
    if only is not None and not {BIG, BIG_BUDGET} & set(only):
        return
    for name, side in sides.items():
        side.navigate(f"{site}{BIG_PAGE}")
        whole = side.snapshot()
        budgeted = side.snapshot(budgeted=True)
        if "Button 0" not in whole or "Button 0" not in budgeted:
            raise RuntimeError(f"unexpected big page on {name}:\n{whole[:2000]}")
        results[name]["big_answer_chars"] = {BIG: len(whole), BIG_BUDGET: len(budgeted)}
    row(BIG, lambda side: side.snapshot(), 15, 120)
    row(BIG_BUDGET, lambda side: side.snapshot(budgeted=True), 15, 120)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--boxd", default=str(ROOT / "target" / "release" / "boxd"))
    # boxd runs Debian's chromium-headless-shell when it is installed (as Playwright runs its own
    # headless shell); the reference and agent-browser are given /usr/bin/chromium as upstream's image does,
    # or this.
    parser.add_argument("--reference-chromium", default=CHROMIUM)
    # The same executable for boxd too (e.g. /usr/bin/chromium: then all three run chromium's --headless).
    parser.add_argument("--boxd-chromium")
    # As the browser image runs it: every side headed, on /usr/bin/chromium, on an Xvfb display.
    parser.add_argument("--headed", action="store_true")
    # Only these rows (e.g. --rows "snapshot, 10 000 elements;same, interactive 2k tok"); all by default.
    parser.add_argument("--rows", help=f"rows to run, separated by ';', of: {';'.join(ROWS + [SESSIONS])}")
    args = parser.parse_args()
    only = args.rows.split(";") if args.rows else None
    unknown = set(only or ()) - set(ROWS + [SESSIONS])
    if unknown:
        sys.exit(f"unknown rows {sorted(unknown)}; the rows are: {ROWS + [SESSIONS]}")
    xvfb = start_xvfb() if args.headed else None
    try:
        run(args, only)
    finally:
        if xvfb:
            xvfb.terminate()
            xvfb.wait(timeout=10)


def start_xvfb():
    """Xvfb on the first free display from :90; DISPLAY is set for every side."""
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


def boxd_args(args):
    if args.headed:
        return ("--tools", "browser", "--browser-executable", args.boxd_chromium or args.reference_chromium)
    if args.boxd_chromium:
        return ("--tools", "browser", "--browser-headless", "--browser-executable", args.boxd_chromium)
    return ("--tools", "browser", "--browser-headless")


def reference_config(args):
    """The reference's config file: isolated (a fresh context, as boxd's), boxd's viewport, `chromium`."""
    config_dir = tempfile.mkdtemp(prefix="bench-browser-config-")
    config = pathlib.Path(config_dir) / "playwright-mcp.json"
    config.write_text(json.dumps({"browser": {
        "browserName": "chromium", "isolated": True,
        "launchOptions": {
            "executablePath": args.reference_chromium, "headless": not args.headed,
            # As root (containers), Chromium refuses to start with its sandbox; boxd passes --no-sandbox likewise.
            "chromiumSandbox": False},
        "contextOptions": {"viewport": {"width": VIEWPORT[0], "height": VIEWPORT[1]}}}}))
    return config


def add_reference(host, config):
    host.request("/mcp/add_servers", {"server_configs": {"mcpServers": {"playwright": {
        "command": "node", "args": [str(REFERENCE), "--config", str(config)],
        "env": {"PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"}}}}})


def run(args, only):
    for needed, how in ((REFERENCE, "run bench/setup.sh"), (AGENT_BROWSER, "run bench/setup.sh"),
                        (pathlib.Path(args.reference_chromium), "apt-get install chromium")):
        if not needed.exists():
            sys.exit(f"missing {needed}: {how}")
    shell = shutil.which("chromium-headless-shell")
    if args.headed:
        print(f"headed on {os.environ['DISPLAY']}: every side on {args.boxd_chromium or args.reference_chromium}")
    else:
        boxd_browser = args.boxd_chromium or shell or "chromium (no chromium-headless-shell on PATH)"
        print(f"boxd's browser: {boxd_browser}; the reference's and agent-browser's: {args.reference_chromium}")
    print(f"viewport {VIEWPORT[0]}x{VIEWPORT[1]} on every side; agent-browser measured warm (its daemon and "
          f"browser started by its first command), a CLI process per command as its users run it")
    pages, site = serve_pages()
    config = reference_config(args)
    results = {"memory": {}}
    timed_rows = only is None or set(only) & set(ROWS)
    try:
        if timed_rows:
            results.update(timed(args, site, config, only))
        if only is None or SESSIONS in only:
            results["sessions_memory"] = sessions_memory(args, site, config)
    finally:
        pages.shutdown()
    OUT.mkdir(exist_ok=True)
    (OUT / ("browser-headed.json" if args.headed else "browser.json")).write_text(json.dumps(results, indent=2))
    if timed_rows:
        report(results)
    if "sessions_memory" in results:
        report_sessions(results["sessions_memory"])


def timed(args, site, config, only):
    """The timed rows and each side's memory before and after: results[side][row], results['memory']."""
    native = Boxd(args.boxd, *boxd_args(args))
    host = Boxd(args.boxd, "--tools", "mcp")
    agent = AgentBrowser(AGENT_BROWSER, args.reference_chromium, args.headed)
    results = {"memory": {}}
    try:
        results["memory"]["boxd_before"] = memory(native.proc.pid)
        add_reference(host, config)
        results["memory"]["reference_before"] = memory(host.proc.pid)
        agent_side = AgentBrowserSide(agent, "bench")
        sides = {"reference": McpSide(host, {}), "agent-browser": agent_side, "boxd": McpSide(native, BUDGET)}
        # Warm, as its users run it: the daemon and its browser are up before anything is timed (the first
        # navigate row below is then the page's load, not the daemon's start, which is reported apart).
        started = time.perf_counter()
        agent.run("bench", "open", "about:blank")
        results["agent_browser_start_ms"] = (time.perf_counter() - started) * 1000
        agent.run("bench", "set", "viewport", str(VIEWPORT[0]), str(VIEWPORT[1]))
        results.update(workload(sides, site, only))
        for name, server in (("reference", host), ("boxd", native)):
            results["memory"][f"{name}_after"] = memory(server.proc.pid)
        daemon = agent.daemons().get("bench")
        if daemon:
            results["memory"]["agent-browser_after"] = memory(daemon)
        results["boxd_memory_report"] = memory_summary(native)
    finally:
        agent.stop()
        for process in (native, host):
            process.stop()
    return results


def sessions_memory(args, site, config):
    """PSS of SESSION_COUNT isolated sessions, a page loaded in each, per side, one side at a time (PSS
    divides a shared page among the processes mapping it, so the other sides are stopped first)."""
    page = f"{site}/form.html"
    figures = {}
    # The reference: one server per session (its isolated mode: a browser of its own each), each hosted by a
    # boxd as upstream's image hosts it; the hosts are not counted, their node and Chromium trees are.
    hosts = []
    try:
        for _ in range(SESSION_COUNT):
            host = Boxd(args.boxd, "--tools", "mcp")
            hosts.append(host)
            add_reference(host, config)
            tool(host, "browser_navigate", {"url": page})
        figures["reference"] = tree_pss([host.proc.pid for host in hosts], include_roots=False)
        figures["reference"]["what"] = f"{SESSION_COUNT} servers (isolated), node + Chromium"
    finally:
        for host in hosts:
            host.stop()
    # agent-browser: a --session name each, as its users isolate sessions (a daemon and a browser each).
    agent = AgentBrowser(AGENT_BROWSER, args.reference_chromium, args.headed)
    try:
        for number in range(SESSION_COUNT):
            agent.run(f"s{number}", "open", page)
            agent.run(f"s{number}", "set", "viewport", str(VIEWPORT[0]), str(VIEWPORT[1]))
        daemons = agent.daemons()
        if len(daemons) != SESSION_COUNT:
            raise RuntimeError(f"agent-browser: {len(daemons)} daemons for {SESSION_COUNT} sessions: {daemons}")
        figures["agent-browser"] = tree_pss(list(daemons.values()), include_roots=True)
        figures["agent-browser"]["what"] = f"{SESSION_COUNT} --session daemons, each with its Chromium"
    finally:
        agent.stop()
    figures["boxd"] = boxd_sessions(args, page)
    return figures


def boxd_sessions(args, page):
    """boxd's sessions (browser_session_new, a `session` argument on every browser tool), or why not."""
    native = Boxd(args.boxd, *boxd_args(args))
    try:
        tools = native.request("/mcp/list_tools", None, method="GET")
        names = {name for group in tools.values() if isinstance(group, dict) for name in group}
        if "browser_session_new" not in names:
            return {"na": "no sessions in this build"}
        sessions = []
        for _ in range(SESSION_COUNT):
            answer = native.call("browser_session_new", {})
            session = (answer.get("structuredContent") or {}).get("session")
            if not session:
                raise RuntimeError(f"browser_session_new answered no session: {answer}")
            sessions.append(session)
        for session in sessions:
            tool(native, "browser_navigate", {"url": page, "session": session})
        figures = tree_pss([native.proc.pid], include_roots=True)
        figures["what"] = f"one boxd, {SESSION_COUNT} sessions of its one Chromium"
        figures["boxd_memory_report"] = memory_summary(native)
        for session in sessions:
            native.call("browser_session_close", {"session": session})
        # Chromium ends a closed context's renderers after the call answers: measured once fewer processes
        # run and their count has held for half a second (bounded: 10 s, then as it is).
        deadline = time.monotonic() + 10
        after, held = tree_pss([native.proc.pid], include_roots=True), 0
        while time.monotonic() < deadline and (after["processes"] >= figures["processes"] or held < 5):
            time.sleep(0.1)
            now = tree_pss([native.proc.pid], include_roots=True)
            held = held + 1 if now["processes"] == after["processes"] else 0
            after = now
        figures["after_closing"] = after
        return figures
    finally:
        native.stop()


def report(results):
    for other, title in (("reference", "reference"), ("agent-browser", "agent-browser")):
        print(f"{'browser action':<26} {title + ' p50/p95 ms':>22} {'boxd p50/p95 ms':>18} {'ratio p50':>10}")
        other_first, box_first = results[other]["first_navigate"]["ms"], results["boxd"]["first_navigate"]["ms"]
        label = "first navigate"
        if other == "agent-browser":
            # boxd's first navigate starts its Chromium; agent-browser's is measured warm, so its daemon's and
            # Chromium's start (its first command) is added here to compare like with like.
            other_first += results["agent_browser_start_ms"]
            label = "start + first navigate"
        print(f"{label:<26} {other_first:>21.1f} {box_first:>18.1f} {box_first / other_first:>10.3f}")
        for action in ROWS:
            if action not in results["boxd"]:
                continue
            other_row, box = results[other][action], results["boxd"][action]
            print(f"{action:<26} {other_row['p50_ms']:>10.1f} /{other_row['p95_ms']:>9.1f}"
                  f" {box['p50_ms']:>8.1f} /{box['p95_ms']:>7.1f} {box['p50_ms'] / other_row['p50_ms']:>10.3f}")
    print(f"agent-browser's first command (`open about:blank`: starts its daemon and Chromium), counted only in "
          f"its start + first navigate: {results['agent_browser_start_ms']:.0f} ms; every other row is warm")
    if "big_answer_chars" in results["boxd"]:
        print(f"{'answer characters':<26} {'reference':>12} {'agent-browser':>14} {'boxd':>10}")
        for action in (BIG, BIG_BUDGET):
            print(f"{action:<26} {results['reference']['big_answer_chars'][action]:>12}"
                  f" {results['agent-browser']['big_answer_chars'][action]:>14}"
                  f" {results['boxd']['big_answer_chars'][action]:>10}")
        print("(reduced: boxd interactive within 2 000 tokens; agent-browser snapshot -i -c; the reference "
              "has no reduction, its row is its whole snapshot)")
    print(f"{'memory MiB':<20} {'server RSS':>10} {'helpers PSS':>11} {'chromium PSS':>12}")
    for key, row in results["memory"].items():
        print(f"{key:<20} {row['server_mib']:>10.1f} {row['helpers_mib']:>11.1f} {row['chromium_mib']:>12.1f}")
    print("(server: boxd, the reference's boxd host, agent-browser's daemon; helpers: the reference's node)")
    print(f"boxd's GET /memory after the workload, PSS MiB (processes): {results['boxd_memory_report']}")


def report_sessions(figures):
    print(f"{SESSION_COUNT} sessions, a page each, PSS MiB {'processes':>10} {'servers':>8} {'chromium':>9}"
          f" {'total':>8} {'boxd/this':>10}")
    boxd = figures["boxd"]
    for name in ("reference", "agent-browser", "boxd"):
        row = figures[name]
        if "na" in row:
            print(f"{name:<32} n/a ({row['na']})")
            continue
        ratio = f"{boxd['total_mib'] / row['total_mib']:>10.3f}" if "na" not in boxd else f"{'n/a':>10}"
        print(f"{name:<32} {row['processes']:>10} {row['server_mib']:>8.1f} {row['chromium_mib']:>9.1f}"
              f" {row['total_mib']:>8.1f} {ratio}  ({row['what']})")
    if "after_closing" in boxd:
        after = boxd["after_closing"]
        print(f"{'boxd, the sessions closed':<32} {after['processes']:>10} {after['server_mib']:>8.1f}"
              f" {after['chromium_mib']:>9.1f} {after['total_mib']:>8.1f}")
        print(f"boxd's GET /memory with the sessions open, PSS MiB (processes): {boxd['boxd_memory_report']}")


if __name__ == "__main__":
    main()
