"""The training worker (src/training/worker/) driven directly over its stdin/stdout, as boxd
drives it: `python -u -c <source> --env bfcl|appworld`, the source joined for the environment as
src/training/worker.rs joins it. BFCL runs on the real bfcl-eval with data prepared by
src/training/prepare_bfcl.py; AppWorld on the stand-in package of tests/python/training_stub (its
task data cannot be downloaded here)."""
import ast
import json
import os
import pathlib
import select
import subprocess
import sys
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKER = ROOT / "src" / "training" / "worker"
PREPARE = ROOT / "src" / "training" / "prepare_bfcl.py"
STUB = pathlib.Path(__file__).resolve().parent / "training_stub"
ADDITIONAL_FUNCTIONS = "I have updated some more functions you can choose from. What about now?"


def worker_files(env_name):
    """The files boxd joins into the source of a worker of `env_name`, in its order (worker.rs)."""
    return [WORKER / "protocol.py", WORKER / f"{env_name}.py", WORKER / "main.py"]


def worker_source(env_name):
    return "".join(path.read_text() for path in worker_files(env_name))


class Worker:
    """One worker process; `ask` sends a request line and returns the answer line, parsed."""

    def __init__(self, env_name, cwd, env=None, python=(sys.executable,), built_for=None):
        source = worker_source(built_for or env_name)
        self.proc = subprocess.Popen(
            [*python, "-u", "-c", source, "--env", env_name],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=cwd, env={**os.environ, **(env or {})},
        )
        self.stderr = []
        threading.Thread(target=self._drain, daemon=True).start()
        self.ready = self._read()

    def _drain(self):
        for line in self.proc.stderr:
            self.stderr.append(line.decode("utf-8", "replace"))

    def _read(self, timeout=60):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, f"no line from the worker within {timeout} s; stderr:\n{''.join(self.stderr)}"
        line = self.proc.stdout.readline()
        assert line.endswith(b"\n"), f"no full line (stderr:\n{''.join(self.stderr)})"
        return json.loads(line)

    def raw(self, line: bytes):
        self.proc.stdin.write(line)
        self.proc.stdin.flush()
        return self._read()

    def ask(self, op, **fields):
        return self.raw(json.dumps({"op": op, **fields}).encode() + b"\n")

    def data(self, op, **fields):
        answer = self.ask(op, **fields)
        assert answer.get("ok") is True, answer
        return answer["data"]

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        return self.proc.returncode


# ------------------------------------------------------------------------------------------------
# BFCL


@pytest.fixture(scope="module")
def bfcl_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("bfcl")
    done = subprocess.run([sys.executable, str(PREPARE), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "multi_turn: 800 tasks (train 400, val 400)" in done.stdout
    tasks = {}
    with open(out / "multi_turn_processed.jsonl") as f:
        for line in f:
            task = json.loads(line)
            tasks[task["id"]] = task
    return out, tasks


def bfcl_env(out, sub="multi_turn"):
    return {"BFCL_DATA_PATH": str(out / f"{sub}_processed.jsonl"),
            "BFCL_SPLID_ID_PATH": str(out / f"{sub}_split_ids.json")}


@pytest.fixture
def bfcl(bfcl_data, tmp_path):
    workers = []

    def start(**env):
        worker = Worker("bfcl", tmp_path, {**bfcl_env(bfcl_data[0]), **env})
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        assert worker.close() == 0


def named_call(call, functions):
    """A ground-truth call string as a tool call block; positional arguments named by the doc's
    properties order."""
    node = ast.parse(call, mode="eval").body
    name = node.func.id
    properties = list(next(doc for doc in functions if doc["name"] == name)
                      ["parameters"]["properties"])
    arguments = {properties[i]: ast.literal_eval(arg) for i, arg in enumerate(node.args)}
    arguments.update({kw.arg: ast.literal_eval(kw.value) for kw in node.keywords})
    return name, arguments


def block(name, arguments):
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def say(text):
    return {"role": "assistant", "content": text}


def replay(worker, task, turns=None):
    """Plays `task`'s ground truth (its first `turns` turns; all by default) and returns the last
    step's data."""
    functions = list(task["function"])
    for docs in (task.get("missed_function") or {}).values():
        functions += docs
    ground_truth = task["ground_truth"][:turns]
    last = None
    for number, calls in enumerate(ground_truth):
        if calls:
            blocks = [block(*named_call(call, functions)) for call in calls]
            step = worker.data("step", messages=say("Let me do that.\n" + "\n".join(blocks)))
            assert step["is_terminated"] is False and step["reward"] == 0.0
            content = step["state"][0]["content"]
            assert content.count("<tool_call>") == len(calls), content
            assert "is not one of this task's functions" not in content
        last = worker.data("step", messages=say("Done."))
        missed = (task.get("missed_function") or {}).get(str(number + 1))
        if missed and number + 1 < len(task["question"]):
            content = last["state"][0]["content"]
            assert content.endswith(ADDITIONAL_FUNCTIONS)
            assert all(f'"name":"{doc["name"]}"' in content for doc in missed)
    return last


def test_prepare_is_upstreams_split_and_idempotent(bfcl_data, tmp_path):
    out, tasks = bfcl_data
    for sub in ("all", "multi_turn", "single_turn"):
        assert (out / f"{sub}_processed.jsonl").exists()
        assert (out / f"{sub}_split_ids.json").exists()
    splits = json.loads((out / "multi_turn_split_ids.json").read_text())
    assert splits["train"] == ([f"multi_turn_base_{i}" for i in range(200)]
                               + [f"multi_turn_long_context_{i}" for i in range(200)])
    assert splits["val"] == ([f"multi_turn_miss_func_{i}" for i in range(200)]
                             + [f"multi_turn_miss_param_{i}" for i in range(200)])
    miss = tasks["multi_turn_miss_func_0"]
    held = [doc["name"] for docs in miss["missed_function"].values() for doc in docs]
    assert held and not set(held) & {doc["name"] for doc in miss["function"]}
    assert all(isinstance(task["ground_truth"], list) for task in tasks.values())
    again = subprocess.run(
        [sys.executable, str(PREPARE), "--out", str(out), "--subset", "multi_turn"],
        capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "multi_turn: 800 tasks" in again.stdout
    assert json.loads((out / "multi_turn_split_ids.json").read_text()) == splits


def test_ready_and_profile(bfcl):
    worker = bfcl()
    assert worker.ready == {"ready": True, "env": "bfcl", "library": "bfcl-eval 2025.8.25",
                            "tasks": 800}
    train = worker.data("profile", params={"split": "train"})
    val = worker.data("profile", params={"split": "val"})
    assert len(train) == 400 and len(val) == 400 and not set(train) & set(val)
    assert worker.data("profile", params={}) == train
    assert train[0] == "multi_turn_base_0" and val[0] == "multi_turn_miss_func_0"
    assert worker.ask("profile", params={"split": "test"}) == {
        "ok": False, "status": 400, "error": "unknown split 'test': train or val"}


def test_create_state(bfcl, bfcl_data):
    task = bfcl_data[1]["multi_turn_base_0"]
    worker = bfcl()
    created = worker.data("create", task_id="multi_turn_base_0", instance_id="a", params={})
    system, user = created["state"]
    assert system["role"] == "system" and system["content"].startswith(
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n")
    tools = system["content"].split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].splitlines()
    assert [json.loads(tool) for tool in tools] == task["function"]
    assert '{"name": <function-name>, "arguments": <args-json-object>}' in system["content"]
    assert user == {"role": "user", "content": task["question"][0][0]["content"]}
    assert created["info"] == {"instance_id": "a", "task_id": "multi_turn_base_0",
                               "test_id": "multi_turn_base_0", "tools_count": len(task["function"]),
                               "questions_count": len(task["question"])}
    info = worker.data("get_info", messages={}, params={})
    assert info.startswith("Available tools:\n- ") and "\n- cd\n" in info and "unknown" not in info
    # A line number is a task id too.
    other = bfcl()
    assert other.data("create", task_id="1", instance_id="b", params={})["info"]["test_id"] == \
        "multi_turn_base_1"


def test_first_turn_answer_format(bfcl, bfcl_data):
    task = bfcl_data[1]["multi_turn_base_0"]
    worker = bfcl()
    worker.data("create", task_id="multi_turn_base_0", instance_id="a", params={})
    calls = [block(*named_call(call, task["function"])) for call in task["ground_truth"][0]]
    step = worker.data("step", messages=say("\n".join(calls)))
    assert step == {
        "state": [{"role": "user", "tool_calls": [], "content": (
            '<tool_call>\n{"name": "cd_1", "content": {"current_working_directory": "document"}}\n'
            '</tool_call>\n'
            '<tool_call>\n{"name": "mkdir_2", "content": "None"}\n</tool_call>\n'
            '<tool_call>\n{"name": "mv_3", "content": {"result": "\'final_report.pdf\' moved to '
            '\'temp/final_report.pdf\'"}}\n</tool_call>\n')}],
        "reward": 0.0, "is_terminated": False, "info": {}}
    # Arguments as a JSON string, and a message with no call moves to the next question.
    step = worker.data("step", messages=say(
        '<tool_call>{"name": "pwd", "arguments": "{}"}</tool_call>'))
    assert '"name": "pwd_1"' in step["state"][0]["content"]
    step = worker.data("step", messages=say("All done."))
    assert step["state"][0]["content"] == task["question"][1][0]["content"]
    assert step["is_terminated"] is False


@pytest.mark.parametrize("task_id", [
    "multi_turn_base_0", "multi_turn_base_1", "multi_turn_long_context_0",
    "multi_turn_miss_param_0", "multi_turn_miss_func_0", "multi_turn_miss_func_1",
    # Its ground truth calls a held-out function (tail) before the turn that reveals it.
    "multi_turn_miss_func_49",
])
def test_ground_truth_replay_scores_one(bfcl, bfcl_data, task_id):
    task = bfcl_data[1][task_id]
    worker = bfcl()
    worker.data("create", task_id=task_id, instance_id="r", params={})
    last = replay(worker, task)
    assert last["state"][0]["content"] == "[CONVERSATION_COMPLETED]"
    assert last["is_terminated"] is True and last["reward"] == 1.0
    assert worker.data("evaluate", messages={}, params={"sparse": True}) == 1.0
    dense = worker.data("evaluate", messages={}, params={})
    assert dense == {"valid": True, "accuracy": 1.0, "total_count": 1, "correct_count": 1,
                     "test_category": task_id.rsplit("_", 1)[0], "test_id": task_id,
                     "model_name": "env_handler", "input_tokens": 0, "output_tokens": 0,
                     "turn_count": len(task["question"]) - 1, "completed": True}
    if "miss_func" in task_id:
        names = worker.data("get_info", messages={}, params={})
        assert all(f"- {doc['name']}" in names.splitlines()
                   for docs in task["missed_function"].values() for doc in docs)
    assert worker.ask("step", messages=say("more?"))["status"] == 400


def test_wrong_episodes_score_below_one(bfcl, bfcl_data):
    task = bfcl_data[1]["multi_turn_base_0"]
    # No call at all.
    worker = bfcl()
    worker.data("create", task_id="multi_turn_base_0", instance_id="w", params={})
    for _ in task["question"]:
        last = worker.data("step", messages=say("I cannot help."))
    assert last["is_terminated"] is True and last["reward"] == 0.0
    assert worker.data("evaluate", messages={}, params={"sparse": True}) == 0.0
    # The right calls but one wrong argument.
    worker = bfcl()
    worker.data("create", task_id="multi_turn_base_0", instance_id="w2", params={})
    broken = json.loads(json.dumps(task))
    broken["ground_truth"][0] = [call.replace("'temp'", "'tmp'")
                                 for call in broken["ground_truth"][0]]
    last = replay(worker, broken)
    assert last["is_terminated"] is True and last["reward"] == 0.0
    dense = worker.data("evaluate", messages={}, params={"sparse": False})
    assert dense["accuracy"] == 0.0 and dense["completed"] is True


def test_evaluate_mid_episode_leaves_it_usable(bfcl, bfcl_data):
    task = bfcl_data[1]["multi_turn_base_1"]
    worker = bfcl()
    worker.data("create", task_id="multi_turn_base_1", instance_id="m", params={})
    assert worker.data("evaluate", messages={}, params={"sparse": True}) == 0.0
    replay(worker, task, turns=1)
    assert worker.data("evaluate", messages={}, params={"sparse": True}) == 0.0
    dense = worker.data("evaluate", messages={}, params={})
    assert dense["turn_count"] == 1 and dense["completed"] is False
    # Every turn played but the last one not closed yet: already scored.
    worker2 = bfcl()
    worker2.data("create", task_id="multi_turn_base_1", instance_id="m2", params={})
    replay(worker2, task, turns=len(task["ground_truth"]) - 1)
    functions = task["function"]
    blocks = [block(*named_call(call, functions)) for call in task["ground_truth"][-1]]
    if blocks:
        worker2.data("step", messages=say("\n".join(blocks)))
    assert worker2.data("evaluate", messages={}, params={"sparse": True}) == 1.0
    assert worker2.data("evaluate", messages={}, params={"sparse": True}) == 1.0
    last = worker2.data("step", messages=say("Done."))
    assert last["is_terminated"] is True and last["reward"] == 1.0
    # The first episode goes on after its evaluations and still scores 1.
    rest = {**task, "ground_truth": task["ground_truth"][1:], "question": task["question"][1:]}
    last = replay(worker, rest)
    assert last["is_terminated"] is True and last["reward"] == 1.0
    assert worker.data("evaluate", messages={}, params={"sparse": True}) == 1.0


def test_policy_output_never_runs_as_code(bfcl, bfcl_data, tmp_path):
    task = bfcl_data[1]["multi_turn_base_0"]
    worker = bfcl()
    worker.data("create", task_id="multi_turn_base_0", instance_id="x", params={})
    pid = worker.proc.pid
    marker = tmp_path / "pwned"
    attempts = [
        ("(lambda: 'INJ'+str(6*7))", {}),
        ("__import__('os').getpid", {}),
        ("exec", {"source": "import os"}),
        ("get_stock_info", {"symbol": "AAPL"}),  # a TradingBot function: not this task's
        ("cd", {"folder": "document", f"__import__('os').system('touch {marker}')": 1}),
        ("cd", {"folder": "document", "lambda": 1}),
        ("cd", {"folder": f"x'); __import__('os').system('touch {marker}'); ('"}),
        ("cd", {"folder": float("nan")}),
        ("cd", "[1, 2]"),
        ("sort", {"file_name": "x"}),  # held out in miss_func tasks, declared here: allowed
    ]
    content = "".join(block(name, args) for name, args in attempts)
    step = worker.data("step", messages=say(content))
    results = step["state"][0]["content"]
    assert "INJ42" not in results and str(pid) not in results
    assert not marker.exists()
    answers = [json.loads(part.split("\n")[1]) for part in results.split("<tool_call>")[1:]]
    assert [answer["name"] for answer in answers] == [f"{name}_{i}" for i, (name, _) in
                                                      enumerate(attempts, start=1)]
    not_one = "is not one of this task's functions"
    assert answers[0]["content"] == f"Error: \"(lambda: 'INJ'+str(6*7))\" {not_one}"
    assert answers[1]["content"] == f"Error: \"__import__('os').getpid\" {not_one}"
    assert answers[2]["content"] == "Error: 'exec' is not one of this task's functions"
    assert answers[3]["content"] == "Error: 'get_stock_info' is not one of this task's functions"
    assert "is not a parameter of 'cd'" in answers[4]["content"]
    assert "is not a parameter of 'cd'" in answers[5]["content"]
    # The value stays one string: cd answers that there is no such directory.
    assert "No such directory" in answers[6]["content"]["error"]
    assert "__import__('os').system" in answers[6]["content"]["error"]
    assert "non-finite" in answers[7]["content"]
    assert "must be a JSON object" in answers[8]["content"]
    # The refused calls were not recorded: the ground truth still scores 1.
    last = replay(worker, task)
    assert last["reward"] == 1.0


def test_caller_mistakes(bfcl):
    worker = bfcl()
    for line in (b"not json\n", b"[1, 2]\n", b'{"op": 5}\n', b'{"op": "nope"}\n', b"\xff\xfe\n",
                 b'{"op": "profile", "params": [1]}\n', b"\n"):
        answer = worker.raw(line)
        assert answer["ok"] is False and answer["status"] == 400, (line, answer)
        assert "\n" not in answer["error"]
    assert worker.ask("step", messages=say("x"))["error"] == \
        "step before create: this worker has no instance"
    assert worker.ask("evaluate", messages={}, params={})["status"] == 400
    assert worker.ask("create", task_id="nope", instance_id="a", params={}) == {
        "ok": False, "status": 400, "error": "unknown task 'nope' for bfcl: see get_env_profile"}
    assert worker.ask("create", task_id="99999", instance_id="a", params={})["status"] == 400
    assert worker.ask("create", instance_id="a", params={})["error"] == "task_id is required"
    worker.data("create", task_id="multi_turn_base_0", instance_id="a", params={})
    second = worker.ask("create", task_id="multi_turn_base_1", instance_id="b", params={})
    assert second["status"] == 400
    assert worker.ask("profile", params={})["status"] == 400
    assert worker.ask("step", messages={})["error"].startswith("messages.content is required")
    assert worker.ask("step", messages={"content": 5})["error"] == \
        "messages.content must be a string"
    assert worker.ask("step", messages="hello")["status"] == 400
    # Still serving.
    assert worker.data("step", messages=say("next"))["is_terminated"] is False


def test_step_bounds(bfcl):
    """A policy's output cannot make a worker work or grow without end: the scan of a content full of
    openings is linear, and a step's size, its calls and its results are bounded."""
    worker = bfcl()
    worker.data("create", task_id="multi_turn_base_0", instance_id="a", params={})
    started = time.monotonic()
    answer = worker.data("step", messages=say('<tool_call>{"' * 20000))
    assert time.monotonic() - started < 5 and answer["state"][0]["content"]
    too_long = worker.ask("step", messages=say("x" * (256 * 1024 + 1)))
    assert too_long["status"] == 400 and "at most 262144" in too_long["error"]
    many = worker.ask("step", messages=say(block("pwd", {}) * 129))
    assert many["status"] == 400 and many["error"] == "129 tool calls in one step; at most 128"
    big = "y" * 200_000
    worker.data("step", messages=say(block("echo", {"content": big, "file_name": "big.txt"})))
    # 128 reads of 200 000 characters: the calls past 8 MiB of results are not run, and say so.
    content = worker.data("step", messages=say(block("cat", {"file_name": "big.txt"}) * 128))
    results = content["state"][0]["content"].split("</tool_call>\n")[:-1]
    assert len(results) == 128
    assert "not run: this step's results passed" in results[-1]
    assert big in results[0]
    assert len(content["state"][0]["content"]) < 9 * 1024 * 1024
    # Still serving.
    assert worker.data("step", messages=say("next"))["is_terminated"] is False


def test_single_turn_task_refused(bfcl, bfcl_data):
    worker = bfcl(**bfcl_env(bfcl_data[0], "all"))
    assert worker.ready["tasks"] == 3891
    answer = worker.ask("create", task_id="irrelevance_0", instance_id="s", params={})
    assert answer["status"] == 400 and "single-turn" in answer["error"]


def test_missing_data_and_library(bfcl, tmp_path):
    worker = bfcl(BFCL_DATA_PATH=str(tmp_path / "none.jsonl"))
    assert worker.ready == {"ready": False, "error": (
        f"BFCL data not found at {tmp_path / 'none.jsonl'}: run prepare_bfcl.py --out DIR "
        "(set BFCL_DATA_PATH)")}
    # Without site-packages (-S), bfcl_eval is not importable.
    bare = Worker("bfcl", tmp_path, python=(sys.executable, "-S"))
    assert bare.ready["ready"] is False
    assert bare.ready["error"].startswith("the environment library bfcl_eval is not installed in ")
    assert bare.ready["error"].endswith(": pip install --no-deps bfcl-eval==2025.8.25")
    assert bare.close() == 0
    unknown = Worker("nope", tmp_path, built_for="bfcl")
    assert unknown.ready == {"ready": False,
                             "error": "unknown environment 'nope': this worker serves --env bfcl"}
    assert unknown.close() == 0


def test_a_worker_holds_only_its_own_environment():
    bfcl, appworld = worker_source("bfcl"), worker_source("appworld")
    assert "class Bfcl" in bfcl and "class AppWorldEnv" not in bfcl
    assert "class AppWorldEnv" in appworld and "class Bfcl" not in appworld


# ------------------------------------------------------------------------------------------------
# AppWorld, on the stand-in package


def appworld_root(root, tasks=("task_a_1", "task_b_1")):
    for number, task_id in enumerate(tasks):
        task = root / "data" / "tasks" / task_id
        (task / "ground_truth").mkdir(parents=True)
        (task / "specs.json").write_text(json.dumps({
            "instruction": f"How many playlists do I have? ({task_id})",
            "supervisor": {"first_name": "Ada", "last_name": "Lovelace",
                           "email": "ada@example.com", "phone_number": "5550100"},
            "datetime": "2023-05-18T12:00:00", "db_version": "0.1.0"}))
        (task / "ground_truth" / "answer.json").write_text(json.dumps({"answer": 7 + number}))
    datasets = root / "data" / "datasets"
    datasets.mkdir(parents=True)
    (datasets / "train.txt").write_text(tasks[0] + "\n")
    (datasets / "dev.txt").write_text("\n".join(tasks[1:]) + "\n")
    (datasets / "test_normal.txt").write_text("")
    return root


@pytest.fixture
def appworld(tmp_path):
    workers = []
    root = appworld_root(tmp_path / "appworld")

    def start(root=root):
        env = {"APPWORLD_ROOT": str(root), "PYTHONPATH": str(STUB)}
        worker = Worker("appworld", tmp_path, env)
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        assert worker.close() == 0


def test_appworld_episode(appworld):
    worker = appworld()
    assert worker.ready == {"ready": True, "env": "appworld", "library": "appworld 0.1.3.post1",
                            "tasks": 2}
    # The library's print reaches stderr (not the protocol); the reader thread may lag a little.
    deadline = time.monotonic() + 5
    while not any("appworld stand-in imported" in line for line in worker.stderr):
        assert time.monotonic() < deadline, worker.stderr
        time.sleep(0.02)
    assert worker.data("profile", params={"split": "train"}) == ["task_a_1"]
    assert worker.data("profile", params={}) == ["task_a_1"]
    assert worker.data("profile", params={"split": "dev"}) == ["task_b_1"]
    assert worker.data("profile", params={"split": "val"}) == ["task_b_1"]
    assert worker.ask("profile", params={"split": "../x"})["status"] == 400
    assert worker.ask("profile", params={"split": "nope"})["error"] == \
        "unknown split 'nope': dev, test_normal, train"
    assert worker.ask("create", task_id="nope", instance_id="a", params={})["error"] == \
        "unknown task 'nope' for appworld: see get_env_profile"
    created = worker.data("create", task_id="task_a_1", instance_id="exp_1_abc", params={})
    system, user = created["state"]
    assert system["role"] == "system" and "apis.api_docs.show_api_doc" in system["content"]
    assert "Ada Lovelace" in system["content"] and "ada@example.com" in system["content"]
    assert user == {"role": "user", "content": "How many playlists do I have? (task_a_1)"}
    assert created["info"] == {"instance_id": "exp_1_abc", "task_id": "task_a_1"}
    info = worker.data("get_info", messages={}, params={})
    assert info.startswith("Available tools:\n- appworld: ") and "\n- supervisor: " in info

    step = worker.data("step", messages=say(
        "Let me look.\n```python\nprint(apis.supervisor.show_profile()['first_name'])\n```"))
    assert step == {"state": [{"role": "user", "content": "Output:\n```\nAda\n```\n\n",
                               "tool_calls": []}],
                    "reward": 0.0, "is_terminated": False, "info": {}}
    step = worker.data("step", messages={"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "appworld",
                      "arguments": json.dumps({"code": "x = 3\nprint(x * 2)"})}},
        {"index": 1, "name": "shell", "arguments": "{}"},
    ]})
    content = step["state"][0]["content"]
    assert content.startswith("Output:\n```\n6\n```\n\n") and "tool 'shell' not found" in content
    assert worker.data("evaluate", messages={}, params={"sparse": True}) == 0.0
    assert worker.data("evaluate", messages={}, params={}) == 0.0
    # A wrong answer: half the tests pass (the terminating reward is the dense ratio by default).
    step = worker.data("step", messages=say(
        "```python\napis.supervisor.complete_task(answer=x)\n```"))
    assert step["is_terminated"] is True and step["reward"] == 0.5
    assert worker.data("evaluate", messages={}, params={"sparse": True}) == 0.0
    assert worker.data("evaluate", messages={}, params={"sparse": False}) == 0.5


def test_appworld_right_answer_and_simple_mode(appworld, tmp_path):
    worker = appworld()
    worker.data("create", task_id="task_a_1", instance_id="../../escape", params={"simple": True})
    step = worker.data("step", messages=say("apis.supervisor.complete_task(answer=7)"),
                       params={"sparse": True})
    assert step["state"][0]["content"] == "Marked the active task complete.\n"
    assert step["is_terminated"] is True and step["reward"] == 1.0
    assert worker.data("evaluate", messages={}, params={"sparse": True}) == 1.0
    # An instance id is no path: the outputs stay under experiments/outputs.
    assert not (tmp_path / "appworld" / "escape").exists()
    assert len(list((tmp_path / "appworld" / "experiments" / "outputs").iterdir())) == 1
    assert worker.ask("create", task_id="task_b_1", instance_id="b", params={})["status"] == 400


def test_appworld_without_data_or_library(appworld, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    worker = appworld(root=empty)
    assert worker.ready["ready"] is False
    assert worker.ready["error"].startswith("AppWorld task data not installed")
    assert worker.ready["error"].endswith(
        "build the image with `make image-appworld APPWORLD_DATA=images/appworld/data/<dir, "
        "data-0.1.0.bundle or archive>` (see images/README.md)")
    bare = Worker("appworld", tmp_path, {"APPWORLD_ROOT": str(empty)})  # no stand-in, no library
    assert bare.ready["ready"] is False
    assert bare.ready["error"].startswith("the environment library appworld is not installed in ")
    assert bare.close() == 0


def test_appworld_policy_code_runs_without_the_protocol(appworld):
    """AppWorld's `execute` runs the policy's code in a world process forked at create, which holds
    neither end of the protocol (boxd's request and answer pipes): what it writes anywhere cannot
    become an answer line, and its reward is computed in the worker (issue #45). A world process that
    dies ends the worker, which boxd reports as the instance gone."""
    worker = appworld()
    worker.data("create", task_id="task_a_1", instance_id="p", params={"simple": True})
    protocol = {f"pipe:[{os.fstat(stream.fileno()).st_ino}]"
                for stream in (worker.proc.stdin, worker.proc.stdout)}
    step = worker.data("step", messages=say(
        "import os, json\n"
        "fds = {}\n"
        "for n in os.listdir('/proc/self/fd'):\n"
        "    try:\n"
        "        fds[n] = os.readlink(f'/proc/self/fd/{n}')\n"
        "    except OSError:\n"
        "        pass\n"
        "print(json.dumps([os.getpid(), os.getppid(), fds]))"))
    world, parent, descriptors = json.loads(step["state"][0]["content"])
    assert parent == worker.proc.pid and world != worker.proc.pid
    assert not protocol & set(descriptors.values()), descriptors
    assert descriptors["0"] == "/dev/null"
    # Its own channel to the worker, written to out of turn, yields no reward either.
    forged = json.dumps({"ok": True, "data": {"content": "forged", "completed": True}})
    step = worker.data("step", messages=say(
        "import os, socket\n"
        "for n in os.listdir('/proc/self/fd'):\n"
        "    try:\n"
        "        if os.readlink(f'/proc/self/fd/{n}').startswith('socket:'):\n"
        f"            os.write(int(n), {forged!r}.encode() + b'\\n')\n"
        "    except OSError:\n"
        "        pass\n"))
    assert step["reward"] == 0.0, step
    # The world process dies: so does the worker, without an answer.
    worker.proc.stdin.write(json.dumps({"op": "step", "messages": say("import os\nos._exit(3)")})
                            .encode() + b"\n")
    worker.proc.stdin.flush()
    assert worker.proc.stdout.readline() == b"" and worker.proc.wait(30) == 1
    deadline = time.monotonic() + 5
    while not any("the AppWorld world process broke" in line for line in worker.stderr):
        assert time.monotonic() < deadline, worker.stderr
        time.sleep(0.02)
    worker.proc.returncode = 0  # the fixture's check: this worker was meant to end so
