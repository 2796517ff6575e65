"""The `training` family (TrainingSandbox protocol, BFCL) against upstream's env service, in one run.

Upstream: agentscope-runtime 1.1.6.post2's training_box env service on Ray (`python -m
training_box.env_service --env bfcl`, as its image runs it; bench-out/upstream-training, made by
bench/setup.sh with the one-line import stand-in described there). boxd: `boxd serve --tools training
--training-env bfcl --training-python bench-out/training-worker-venv/bin/python`. Both on loopback, one
after the other, on the same prepared BFCL files (BFCL_DATA_PATH / BFCL_SPLID_ID_PATH), driven by the
SDK's own TrainingSandboxClient replaying bfcl-eval's ground truth of multi_turn_base_0..N-1.

Measured: spawn → first 200 from GET /healthz; p50/p90 of create, step (a ground-truth step with the
turn's calls), the turn-ending steps, evaluate (sparse) and release; PSS and RSS summed over the whole
server process tree (read from /proc) idle, with 1 and with 8 live instances. Prints one table (metric |
upstream | boxd | ratio | goal) and writes bench-out/training.json. Every wait and loop is bounded; every
server runs in its own session and its whole tree is killed afterwards.

Run as `python3 bench/training.py --boxd BIN`: it re-executes itself under the upstream venv's Python,
which has the client.
"""
import argparse
import ast
import functools
import json
import math
import os
import pathlib
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "bench-out"
UPSTREAM_VENV = OUT / "upstream-training"
UPSTREAM_APP = UPSTREAM_VENV / "app"  # training_box/ as a top-level package, as in upstream's image
WORKER_VENV = OUT / "training-worker-venv"
PREPARE = ROOT / "src" / "training" / "prepare_bfcl.py"
SUBSET = "multi_turn"
TOKEN = "bench-token"  # the manager injects SECRET_TOKEN; the training routes ignore it (upstream too)
IMAGE = "docker.io/agentscope/runtime-sandbox-bfcl:latest"
REQUEST_TIMEOUT = 120  # seconds, any one client request (the SDK's POSTs have none)
SERVER_BUDGET = 900  # seconds, everything done with one server; then it is killed


def log(message):
    print(f"bench training: {message}", file=sys.stderr, flush=True)


def reexec_in_venv():
    try:
        import agentscope_runtime.sandbox.client.training_client  # noqa: F401
        return
    except ImportError:
        pass
    python = UPSTREAM_VENV / "bin" / "python"
    if not python.exists():
        sys.exit(f"missing {python}: run bench/setup.sh")
    if os.environ.get("BENCH_TRAINING_REEXEC"):
        sys.exit(f"{python} cannot import the TrainingSandboxClient: run bench/setup.sh")
    os.environ["BENCH_TRAINING_REEXEC"] = "1"
    os.execv(str(python), [str(python), str(pathlib.Path(__file__).resolve()), *sys.argv[1:]])


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def percentile(samples, fraction):
    """Nearest rank."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


# ---------------------------------------------------------------- process tree and memory (from /proc)

def proc_table():
    """pid -> (ppid, session) of every process."""
    table = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            table[int(stat.parent.name)] = (int(fields[1]), int(fields[3]))
        except (OSError, IndexError, ValueError):
            continue
    return table


def tree_pids(root):
    """The server and all its descendants, plus anything left in its session (a daemon that re-parented
    itself to init still belongs to the server's session)."""
    table = proc_table()
    children = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, pending = set(), [root]
    while pending:
        pid = pending.pop()
        if pid in found:
            continue
        found.add(pid)
        pending.extend(children.get(pid, []))
    found |= {pid for pid, (_, session) in table.items() if session == root}
    return found & set(table)


def read_field(path, field):
    try:
        for line in pathlib.Path(path).read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def tree_memory(root):
    """(PSS MiB, RSS MiB, process count) summed over the tree."""
    pids = tree_pids(root)
    pss = sum(read_field(f"/proc/{pid}/smaps_rollup", "Pss:") for pid in pids)
    rss = sum(read_field(f"/proc/{pid}/status", "VmRSS:") for pid in pids)
    return pss / 1024, rss / 1024, len(pids)


def settled_memory(root, minimum=3.0, maximum=20.0):
    """The tree's memory once it stopped moving (two readings 1 s apart within 1 %), at most `maximum` s."""
    time.sleep(minimum)
    deadline = time.monotonic() + maximum - minimum
    last = tree_memory(root)
    while time.monotonic() < deadline:
        time.sleep(1)
        now = tree_memory(root)
        if abs(now[0] - last[0]) <= 0.01 * max(last[0], 1) and now[2] == last[2]:
            return now
        last = now
    return last


# ---------------------------------------------------------------- the servers

class Server:
    def __init__(self, kind, args, data):
        self.kind = kind
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix=f"bench-training-{kind}-"))
        self.log_path = self.dir / "server.log"
        env = {**os.environ, "SECRET_TOKEN": TOKEN, "OPENAI_API_KEY": "bench-not-used",
               "BFCL_DATA_PATH": str(data["jsonl"]), "BFCL_SPLID_ID_PATH": str(data["split"]),
               "PYTHONUNBUFFERED": "1"}
        env.pop("RUST_LOG", None)  # boxd's default level prints the `listening on` line that gives its port
        env.pop("BENCH_TRAINING_REEXEC", None)
        env.pop("VIRTUAL_ENV", None)
        env["RAY_TMPDIR"] = str(self.dir)  # Ray's session files go with the scratch directory
        if kind == "boxd":
            workspace = self.dir / "workspace"
            workspace.mkdir()
            command = [args.boxd, "serve", "--host", "127.0.0.1", "--port", "0", "--workspace", str(workspace),
                       "--tools", "training", "--training-env", "bfcl", "--training-python", args.worker_python]
            cwd = workspace
            self.port = None
        else:
            self.port = free_port()
            # upstream's bfcl.sh: cd to training_box's parent, PYTHONPATH=it, `python -m training_box.env_service`
            env["PYTHONPATH"] = f"{UPSTREAM_APP}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(UPSTREAM_APP)
            # Its Dockerfile points this at bfcl-eval's bundled answers (boxd's worker finds them itself).
            env["BFCL_ANSWER_PATH"] = str(bfcl_package() / "data" / "possible_answer")
            command = [str(UPSTREAM_VENV / "bin" / "python"), "-m", "training_box.env_service", "--env", "bfcl",
                       "--portal", "127.0.0.1", "--port", str(self.port)]
            cwd = UPSTREAM_APP
        self.log_file = open(self.log_path, "wb")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=self.log_file,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.known_pids = {self.proc.pid}
        self.watchdog = threading.Timer(SERVER_BUDGET, self._expire)
        self.watchdog.daemon = True
        self.watchdog.start()
        try:
            self.start_seconds = self._wait_healthy(args.start_timeout)
        except BaseException:
            self.stop()
            raise

    def _expire(self):
        log(f"{self.kind}: over its {SERVER_BUDGET} s budget, killing it")
        self._kill(signal.SIGKILL)

    def _wait_healthy(self, timeout):
        deadline = self.started + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited ({self.proc.returncode}) before /healthz:\n{self.tail()}")
            if self.port is None:
                match = re.search(rb"listening on http://[\d.]+:(\d+)", self.log_path.read_bytes())
                if match:
                    self.port = int(match.group(1))
            if self.port is not None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as response:
                        if response.status == 200:
                            return time.perf_counter() - self.started
                except OSError:
                    pass
            time.sleep(0.01)
        raise RuntimeError(f"{self.kind}: no 200 from /healthz within {timeout} s:\n{self.tail()}")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def memory(self, **kwargs):
        self.known_pids |= tree_pids(self.proc.pid)
        return settled_memory(self.proc.pid, **kwargs)

    def tail(self, lines=25):
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _kill(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        # Anything of the tree that left the process group (never seen here, but Ray starts many).
        for pid in tree_pids(self.proc.pid) | self.known_pids:
            if pid != self.proc.pid:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass

    def stop(self):
        self.watchdog.cancel()
        self.known_pids |= tree_pids(self.proc.pid)
        self._kill(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            pass
        self._kill(signal.SIGKILL)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            log(f"{self.kind}: pid {self.proc.pid} survived SIGKILL")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            alive = [pid for pid in self.known_pids if pathlib.Path(f"/proc/{pid}").exists()
                     and proc_table().get(pid) is not None]
            if not alive:
                break
            time.sleep(0.2)
        else:
            log(f"{self.kind}: still alive after stop: {alive}")
        self.log_file.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------- the workload

def prepare_data(args, scratch):
    """BFCL's multi_turn tasks as both servers read them: boxd's prepare_bfcl.py where it exists, else
    upstream's own preprocessing (bfcl_dataprocess), which it mirrors."""
    out = scratch / "bfcl"
    out.mkdir()
    source = None
    if PREPARE.exists():
        result = subprocess.run([args.worker_python, str(PREPARE), "--out", str(out), "--subset", SUBSET],
                                capture_output=True, text=True, timeout=600)
        if result.returncode == 0:
            source = "src/training/prepare_bfcl.py"
        else:
            log(f"prepare_bfcl.py failed ({result.returncode}), using upstream's preprocessing:\n"
                f"{result.stderr[-2000:]}")
    if source is None:
        code = ("from training_box.environments.bfcl.bfcl_dataprocess import bfcl_task_preprocess as p\n"
                f"p([{SUBSET!r}], 0.5, output_dir={str(out)!r})")
        subprocess.run([str(UPSTREAM_VENV / "bin" / "python"), "-c", code], cwd=UPSTREAM_APP, check=True,
                       env={**os.environ, "PYTHONPATH": str(UPSTREAM_APP), "OPENAI_API_KEY": "bench-not-used"},
                       stdout=subprocess.DEVNULL, timeout=600)
        source = "upstream bfcl_dataprocess.bfcl_task_preprocess"
    data = {"jsonl": out / f"{SUBSET}_processed.jsonl", "split": out / f"{SUBSET}_split_ids.json",
            "source": source}
    for key in ("jsonl", "split"):
        if not data[key].exists():
            raise RuntimeError(f"{source} did not write {data[key]}")
    return data


def bfcl_package():
    """bfcl_eval's directory in the upstream venv (where this runs), without importing it."""
    import importlib.util

    return pathlib.Path(importlib.util.find_spec("bfcl_eval").submodule_search_locations[0])


def ground_truth_episodes(data, count):
    """task_id -> list of turns, each a list of (name, {arg: value}) with positional arguments named by
    the function doc's parameter order."""
    answers = {}
    answer_file = bfcl_package() / "data" / "possible_answer" / "BFCL_v4_multi_turn_base.json"
    for line in answer_file.read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            answers[entry["id"]] = entry["ground_truth"]
    wanted = [f"multi_turn_base_{index}" for index in range(count)]
    docs = {}
    with open(data["jsonl"], encoding="utf-8") as lines:
        for line in lines:
            entry = json.loads(line)
            if entry["id"] in wanted:
                docs[entry["id"]] = {doc["name"]: list(doc["parameters"]["properties"]) for doc in entry["function"]}
    episodes = {}
    for task in wanted:
        turns = []
        for turn in answers[task]:
            calls = []
            for text in turn:
                call = ast.parse(text, mode="eval").body
                name = call.func.id if isinstance(call.func, ast.Name) else ast.unparse(call.func)
                params = docs[task][name.split(".")[-1]]
                arguments = {params[index]: ast.literal_eval(node) for index, node in enumerate(call.args)}
                arguments.update({keyword.arg: ast.literal_eval(keyword.value) for keyword in call.keywords})
                calls.append((name, arguments))
            turns.append(calls)
        episodes[task] = turns
    return episodes


def assistant(calls):
    if not calls:
        return {"role": "assistant", "content": "Done."}
    blocks = [f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"
              for name, arguments in calls]
    return {"role": "assistant", "content": "\n".join(blocks)}


def timed(samples, key, call):
    started = time.perf_counter()
    result = call()
    samples.setdefault(key, []).append(time.perf_counter() - started)
    return result


def workload(server, episodes, results, notes):
    from agentscope_runtime.sandbox.client.training_client import TrainingSandboxClient

    client = TrainingSandboxClient(base_url=server.url)
    # Bounded: the SDK sets no timeout on its POSTs.
    client.session.post = functools.partial(client.session.post, timeout=REQUEST_TIMEOUT)
    client.timeout = 60
    client.wait_until_healthy()

    results["start_to_healthz_s"] = server.start_seconds
    pss, rss, count = server.memory()
    results.update(idle_pss_mib=pss, idle_rss_mib=rss, idle_processes=count)

    train = client.get_env_profile("bfcl", split="train")
    missing = [task for task in episodes if task not in train]
    if missing:
        raise RuntimeError(f"{server.kind}: train split lacks {missing[:3]}")

    # Memory with 1 and with 8 live instances (created back to back).
    samples = {}
    live = []
    try:
        tasks = list(episodes)
        for index in range(8):
            task = tasks[index % len(tasks)]
            state = timed(samples, "create_back_to_back", lambda: client.create_instance("bfcl", task))
            live.append(state["info"]["instance_id"])
            if index == 0:
                pss, rss, count = server.memory()
                results.update(live1_pss_mib=pss, live1_rss_mib=rss, live1_processes=count)
        pss, rss, count = server.memory()
        results.update(live8_pss_mib=pss, live8_rss_mib=rss, live8_processes=count)
    finally:
        for instance in live:
            client.release_instance(instance)
    for metric in ("pss", "rss"):
        results[f"per_instance_{metric}_mib"] = (results[f"live8_{metric}_mib"] - results[f"idle_{metric}_mib"]) / 8

    # Latency: each task's ground truth replayed, one episode at a time.
    scores, rewards, errors = [], [], []
    for task, turns in episodes.items():
        state = timed(samples, "create", lambda: client.create_instance("bfcl", task))
        instance = state["info"]["instance_id"]
        try:
            questions = state["info"].get("questions_count")
            if questions is not None and questions != len(turns):
                errors.append(f"{task}: {questions} questions, {len(turns)} ground-truth turns")
            for number, calls in enumerate(turns):
                if calls:
                    out = timed(samples, "step", lambda: client.step(instance, assistant(calls)))
                    content = out["state"][0]["content"]
                    if "Error during execution" in content:
                        errors.append(f"{task} turn {number}: {content[:200]}")
                last = number == len(turns) - 1
                out = timed(samples, "step_final" if last else "step_turn_end",
                            lambda: client.step(instance, assistant([])))
                if last:
                    rewards.append(out["reward"])
                    if not out["is_terminated"]:
                        errors.append(f"{task}: not terminated after the last turn")
            try:
                scores.append(timed(samples, "evaluate", lambda: client.evaluate(instance, params={"sparse": True})))
            except ValueError as error:
                errors.append(f"{task} evaluate: {str(error)[:300]}")
        finally:
            timed(samples, "release", lambda: client.release_instance(instance))

    for key, values in samples.items():
        results[f"{key}_p50_ms"] = statistics.median(values) * 1000
        results[f"{key}_p90_ms"] = percentile(values, 0.9) * 1000
        results[f"{key}_n"] = len(values)
    results["final_step_reward_mean"] = statistics.mean(rewards) if rewards else None
    results["evaluate_score_mean"] = statistics.mean(scores) if scores else None
    if errors:
        notes.extend(f"{server.kind}: {error}" for error in errors[:10])


# ---------------------------------------------------------------- report

def image_size_mib():
    if not shutil.which("podman"):
        return None, "podman not found"
    try:
        result = subprocess.run(["podman", "image", "inspect", IMAGE, "--format", "{{.Size}}"],
                                capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return None, "podman timed out"
    if result.returncode != 0:
        return None, f"{IMAGE} not built here"
    return int(result.stdout.strip()) / 2**20, None


# metric, unit, goal: ("abs", x) boxd ≤ x, ("ratio", r) boxd/upstream ≤ r, None
TABLE = [
    ("start_to_healthz_s", "s", ("abs", 1.0)),
    ("create_p50_ms", "ms", ("ratio", 0.1)), ("create_p90_ms", "ms", None),
    ("create_back_to_back_p50_ms", "ms", None),
    ("step_p50_ms", "ms", ("ratio", 1.0)), ("step_p90_ms", "ms", None),
    ("step_turn_end_p50_ms", "ms", None), ("step_final_p50_ms", "ms", None),
    ("evaluate_p50_ms", "ms", None), ("evaluate_p90_ms", "ms", None),
    ("release_p50_ms", "ms", None), ("release_p90_ms", "ms", None),
    ("idle_pss_mib", "MiB", ("ratio", 0.1)), ("idle_rss_mib", "MiB", None),
    ("live1_pss_mib", "MiB", None), ("live8_pss_mib", "MiB", None), ("live8_rss_mib", "MiB", None),
    ("per_instance_pss_mib", "MiB", ("ratio", 0.5)), ("per_instance_rss_mib", "MiB", None),
    ("idle_processes", "", None), ("live8_processes", "", None),
    ("final_step_reward_mean", "", None), ("evaluate_score_mean", "", None),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boxd", default=str(ROOT / "target" / "release" / "boxd"))
    parser.add_argument("--worker-python", default=str(WORKER_VENV / "bin" / "python"),
                        help="the interpreter boxd's training worker runs on (bfcl-eval without its tree)")
    parser.add_argument("--tasks", type=int, default=10, help="multi_turn_base_0..N-1 (at most 200)")
    parser.add_argument("--only", choices=["upstream", "boxd"], help="run one side (development)")
    parser.add_argument("--start-timeout", type=float, default=120)
    args = parser.parse_args()
    reexec_in_venv()
    args.boxd = str(pathlib.Path(args.boxd).resolve())
    args.tasks = max(1, min(args.tasks, 200))
    if not pathlib.Path(args.worker_python).exists():
        sys.exit(f"missing {args.worker_python}: run bench/setup.sh")

    scratch = pathlib.Path(tempfile.mkdtemp(prefix="bench-training-"))
    measured, notes = {"upstream": {}, "boxd": {}}, []
    try:
        data = prepare_data(args, scratch)
        log(f"BFCL data from {data['source']}")
        episodes = ground_truth_episodes(data, args.tasks)
        for kind in ("upstream", "boxd"):
            if args.only and kind != args.only:
                continue
            log(f"{kind} ...")
            server = None
            try:
                server = Server(kind, args, data)
                workload(server, episodes, measured[kind], notes)
            except Exception as error:  # the other side still runs; the report says what failed
                notes.append(f"{kind} failed: {type(error).__name__}: {str(error)[:500]}")
                log(f"{kind} failed: {error}\n{server.tail() if server else ''}")
            finally:
                if server is not None:
                    server.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    ours, why = image_size_mib()
    images = {"boxd": ours, "boxd_note": why, "upstream": None,
              "upstream_note": "n/a (upstream's image cannot be rebuilt)"}

    rows = []
    for metric, unit, goal in TABLE:
        upstream, boxd = measured["upstream"].get(metric), measured["boxd"].get(metric)
        ratio = boxd / upstream if upstream and boxd is not None else None
        met = None
        if goal and goal[0] == "abs" and boxd is not None:
            met = boxd <= goal[1]
        elif goal and goal[0] == "ratio" and ratio is not None:
            met = ratio <= goal[1]
        rows.append({"metric": metric, "unit": unit, "upstream": upstream, "boxd": boxd, "ratio": ratio,
                     "goal": goal and list(goal), "met": met})

    machine = f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}"
    OUT.mkdir(exist_ok=True)
    (OUT / "training.json").write_text(json.dumps(
        {"machine": machine, "boxd": args.boxd, "data": data["source"], "tasks": list(episodes),
         "rows": rows, "measured": measured, "images_mib": images, "notes": notes}, indent=2))

    fmt = lambda value: "-" if value is None else f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"  # noqa: E731
    print(f"machine: {machine}; boxd: {args.boxd}; {len(episodes)} BFCL tasks ({data['source']})")
    print("| metric | upstream | boxd | ratio | goal |")
    print("|---|---:|---:|---:|---|")
    for row in rows:
        goal = ""
        if row["goal"]:
            kind, value = row["goal"]
            goal = (f"boxd ≤ {value} {row['unit']}" if kind == "abs" else f"ratio ≤ {value}")
            goal += "" if row["met"] is None else " met" if row["met"] else " MISSED"
        name = f"{row['metric']} ({row['unit']})" if row["unit"] else row["metric"]
        print(f"| {name} | {fmt(row['upstream'])} | {fmt(row['boxd'])} | {fmt(row['ratio'])} | {goal} |")
    print(f"| image size (MiB) | {images['upstream_note']} | {fmt(ours) if ours else why} | - | |")
    for note in notes:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
