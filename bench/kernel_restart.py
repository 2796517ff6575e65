"""Issue #49's bench row: how long the IPython family takes to restart its kernel, with the spare kernel
(`--kernel-spare on`, the default) and without it (`--kernel-spare off`: a fresh interpreter imports IPython,
which is what boxd did before the spare).

A restart is timed from the moment it is needed to the new kernel answering a cell, as a client sees it: from
the answer that says the kernel was replaced (or, for the RSS cap, the answer of the cell that grew it, after
which boxd recycles the kernel) to the answer of the next cell, `print('x' in dir())`, which must come from a
fresh kernel (its stdout starts with boxd's notice and ends with `False`). So the figure holds one HTTP round
trip and one cell besides the restart. Three ways a kernel is replaced, 20 restarts each (p50 and p95):
- `interrupt`: a cell that ignores SIGINT past its timeout (0.2 s; boxd's grace is 3 s, then it kills);
- `died`: a cell that kills its kernel (`os._exit(1)`);
- `rss_cap`: `--kernel-max-rss 200` and a cell that holds 250 MiB.
The last two have their rounds 1 s apart: restarts closer together than a kernel's start (~0.2 s, more on a
loaded machine) would meet the spare warmed after the previous one still starting, and wait for the rest of
its start (back to back, `rss_cap` measured 283 ms p50 against 431 ms without a spare, under a load of 8).

Prints one table and writes bench-out/kernel_restart.json. Run as `python3 bench/kernel_restart.py --boxd BIN`;
the kernel's interpreter is `--python` (default: the repository's .venv, else the bench's upstream venv).
Every loop is bounded in count and time; the whole run takes about four minutes (the interrupt grace).
"""
import argparse
import json
import os
import platform
import statistics
import time

from family_bench import OUT, ROOT, Boxd

ROUNDS = 20
GOAL_MS = 50.0
# Seconds one scenario of one mode may take; past it, the rounds done so far are reported.
BUDGET_SECONDS = 180
FRESH = "print('x' in dir())"
SCENARIOS = {
    "interrupt": {
        "args": [],
        "setup": "x = 1",
        "trigger": {"code": "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)",
                    "timeout": 0.2},
        "pause": 0.0,
    },
    "died": {
        "args": [],
        "setup": "x = 1",
        "trigger": {"code": "import os; os._exit(1)"},
        "pause": 1.0,
    },
    "rss_cap": {
        "args": ["--kernel-max-rss", "200"],
        "setup": None,
        "trigger": {"code": "x = bytearray(250 * 2**20)"},
        "pause": 1.0,
    },
}


def cell(boxd, arguments):
    return boxd.request("/tools/run_ipython_cell", arguments)


def stdout_of(result):
    for item in result.get("content", []):
        if item.get("description") == "stdout":
            return item.get("text", "")
    return ""


def restarts(binary, python, spare, scenario):
    """Seconds each restart took, at most ROUNDS of them."""
    setting = SCENARIOS[scenario]
    spare_args = [] if spare is None else ["--kernel-spare", spare]
    boxd = Boxd(binary, "--tools", "ipython", "--python", python, *spare_args, *setting["args"])
    taken = []
    try:
        cell(boxd, {"code": "1"})
        deadline = time.monotonic() + BUDGET_SECONDS
        # The spare is warmed after a kernel's first cell: the first restart waits for it like any other.
        while len(taken) < ROUNDS and time.monotonic() < deadline:
            time.sleep(setting["pause"])
            if setting["setup"]:
                cell(boxd, {"code": setting["setup"]})
            cell(boxd, setting["trigger"])
            needed = time.perf_counter()
            answer = cell(boxd, {"code": FRESH})
            taken.append(time.perf_counter() - needed)
            text = stdout_of(answer)
            if "fresh IPython kernel" not in text or not text.endswith("False\n"):
                raise RuntimeError(f"{scenario}: not a fresh kernel after the restart: {answer}")
    finally:
        boxd.stop()
    return taken


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--boxd", default=str(ROOT / "target" / "release" / "boxd"))
    default_python = ROOT / ".venv" / "bin" / "python"
    if not default_python.exists():
        default_python = OUT / "upstream-venv" / "bin" / "python"
    parser.add_argument("--python", default=str(default_python))
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--before", help="a boxd built before the spare kernel: the `off` column runs it "
                        "(without --kernel-spare) instead of `--boxd ... --kernel-spare off`")
    args = parser.parse_args()

    rows = []
    for scenario in args.scenarios.split(","):
        figures = {}
        for spare in ("off", "on"):
            if spare == "off" and args.before:
                taken = sorted(restarts(args.before, args.python, None, scenario))
            else:
                taken = sorted(restarts(args.boxd, args.python, spare, scenario))
            figures[spare] = {
                "p50_ms": statistics.median(taken) * 1000,
                "p95_ms": taken[min(len(taken) - 1, int(len(taken) * 0.95))] * 1000,
                "n": len(taken),
            }
        rows.append({"metric": f"kernel_restart_{scenario}", **figures})

    machine = f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}"
    OUT.mkdir(exist_ok=True)
    (OUT / "kernel_restart.json").write_text(json.dumps({"machine": machine, "rows": rows}, indent=2))
    print(f"machine: {machine}")
    print("| metric | spare off (fresh interpreter) p50 / p95 ms | spare on p50 / p95 ms | n | goal |")
    print("|---|---:|---:|---:|---|")
    for row in rows:
        off, on = row["off"], row["on"]
        met = "met" if on["p50_ms"] <= GOAL_MS else "MISSED"
        print(f"| {row['metric']} | {off['p50_ms']:.0f} / {off['p95_ms']:.0f} | {on['p50_ms']:.1f} / "
              f"{on['p95_ms']:.1f} | {on['n']} | p50 ≤ {GOAL_MS:.0f} ms {met} |")


if __name__ == "__main__":
    main()
