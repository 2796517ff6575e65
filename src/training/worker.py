r"""boxd's training-environment worker: one process serves one instance of BFCL or AppWorld.

boxd embeds this file and runs it as `PYTHON -u -c <this source> --env bfcl|appworld`, one process
per instance (bfcl-eval keeps an episode's simulated state in module globals, so a process is the
isolation), with a scratch directory as cwd and boxd's environment: BFCL_DATA_PATH and
BFCL_SPLID_ID_PATH as agentscope-runtime's manager injects them, APPWORLD_ROOT as the appworld
library reads it. The file stands alone (no sibling imports) and imports only the library of the
env asked.

Protocol (JSON lines, UTF-8, on stdin/stdout)
----------------------------------------------
stdout carries the protocol only. Before importing anything else the worker keeps a private
duplicate of fd 1 for its answers and points fd 1 at fd 2, so whatever a library prints lands on
stderr (boxd logs stderr lines); tracebacks go to stderr too. The working directory is taken off
sys.path (`-c` puts it first), so nothing in it shadows a library.

Who can write the answers (issue #45)
------------------------------------
The answer lines are boxd's only view of an instance, rewards included, so only this process writes
them, and the policy's code never runs in it. The worker makes itself non-dumpable first thing
(PR_SET_DUMPABLE 0): a process of the same uid can then neither open /proc/<worker>/fd/* (the protocol
pipes) nor read or write its memory, nor trace it. BFCL runs no policy code at all (a call runs only
when it names a task's function with checked arguments, see below). AppWorld's `execute` does run the
policy's Python: the world lives in a child process forked at create (the "world process"), which
drops the protocol descriptors (fd 0 becomes /dev/null; the protocol's copy of stdout is closed; fd 1
is stderr) and talks to this process over a socket pair. What it answers is taken as data only: a
step's text and whether the task says it is complete, checked for type and size. The reward is never
the world process's word: this process computes it with appworld's evaluator from the experiment's
saved state (the instance's own world, which its code changes by acting in it, as the task intends).
A world process that dies or breaks its protocol ends this worker (boxd reports the instance gone).
With a uid per instance (boxd's --training-uids), another instance's code cannot reach either process.

First line, once the library and the data are loaded:
    {"ready": true, "env": "bfcl", "library": "bfcl-eval 2025.8.25", "tasks": 800}
or, when they cannot be (the worker then exits 0):
    {"ready": false, "error": "<one line: what is wrong and how to fix it>"}

Then one answer line per request line, until EOF on stdin (exit 0):
    {"op": "profile", "params": {"split": "train"}}
        -> data: [task id, ...]
    {"op": "create", "task_id": str, "instance_id": str, "params": {...}}
        -> data: {"state": [system message, user message], "info": {"instance_id", "task_id", ...}}
    {"op": "step", "messages": {the assistant's message}, "params": {...}}
        -> data: {"state": [message], "reward": float, "is_terminated": bool, "info": {}}
    {"op": "evaluate", "messages": {...}, "params": {"sparse": bool}}
        -> data: a float (sparse) or the environment's dict
    {"op": "get_info", "messages": {...}, "params": {...}}
        -> data: a string naming the real tools
Answers: {"ok": true, "data": ...} or {"ok": false, "status": 400|500, "error": "<one line>"}:
400 for the caller's mistakes (a malformed line, an unknown op, task or split, a step before
create, a second create, a missing or ill-typed message), 500 for a failure inside the
environment (its traceback on stderr). A worker serves at most one instance: `profile` any number
of times before `create`; after a successful `create` only step / evaluate / get_info. boxd kills
the worker on release, on a failed create and on a timeout, so the worker never cleans up.

BFCL (bfcl-eval 2025.8.25, multi-turn categories)
-------------------------------------------------
Data: BFCL_DATA_PATH, a JSON-lines file written by prepare_bfcl.py (a task a line: id, question,
initial_config, involved_classes, function, missed_function, ground_truth), and
BFCL_SPLID_ID_PATH, {"train": [ids], "val": [ids]}. A task id is an id (multi_turn_base_0) or a
line number (all digits).
- create: system = a Qwen-style tool prompt (one compact JSON doc per function inside
  <tools></tools>), user = the first question; info = {instance_id, task_id, test_id,
  tools_count, questions_count}.
- step: only messages.content is read. Each `<tool_call>{"name": ..., "arguments": ...}</tool_call>`
  block is a call; they run in order on bfcl-eval's simulated classes, and the answer is one user
  message concatenating, for call i, `<tool_call>\n{"name": "F_i", "content": R}\n</tool_call>\n`.
  A policy's output never runs as code: a call runs only when its name is one of the task's
  functions (a miss_func task's held-out ones included, as bfcl-eval allows), its argument names
  are parameters of that function and its values are JSON values; the call string bfcl evaluates
  is rebuilt from those checked parts (`name(key=repr(value), ...)`). Anything else answers an
  error for that call and is not scored. A message without a call ends the turn: the next
  question, or "[CONVERSATION_COMPLETED]" with is_terminated and reward = the sparse score (a step
  after that is refused). A miss_func held-out turn reveals its functions with bfcl's prompt for
  prompting models: "<tools>\n{docs}\n</tools>\n" + bfcl's DEFAULT_USER_PROMPT_FOR_ADDITIONAL_
  FUNCTION_FC ("I have updated some more functions you can choose from. What about now?");
  get_info names them from then on.
- evaluate: bfcl's multi_turn_checker (state and response checks against the executed ground
  truth) on one call list per turn (empty turns kept; 0 until every question was asked), on a copy
  of the task and under a fresh model name, so evaluating never disturbs the episode. Sparse: the
  accuracy; dense: {valid, accuracy, total_count, correct_count, test_category, test_id,
  model_name, input_tokens, output_tokens, turn_count, completed}.

AppWorld (appworld 0.1.3.post1, data under APPWORLD_ROOT/data)
--------------------------------------------------------------
- profile: the task ids of a dataset (train, dev, test_normal, test_challenge; "val" means dev when
  there is no val dataset).
- create: AppWorld(task_id, experiment_name from the instance id); state = [system prompt, the
  task's instruction]; params.simple (bare code is run, its output answered as is), params.prompt
  false (a shorter prompt).
- step: the code of the first ```python block in content (with simple: else the content itself),
  or tool_calls named `appworld` with {"code": ...}; each runs in world.execute; is_terminated once
  the task is completed (then reward = evaluate with the step's params).
- evaluate: appworld's evaluate_task on the experiment's saved state; sparse: 1.0 when no test
  fails, else 0.0; dense: the ratio of passed tests.
- get_info: the tool and the task's apps with their descriptions.
"""

import os
import sys

# The protocol's own copy of stdout first, before any import can print.
_PROTOCOL_FD = os.dup(1)
os.dup2(2, 1)


def _set_dumpable(value):
    """prctl(PR_SET_DUMPABLE): 0 keeps processes of the same uid (an AppWorld world process, which
    runs the policy's code) out of this one's /proc/<pid>/fd and memory, and from tracing it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(4, value, 0, 0, 0) == 0  # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        return False


def _die_with_parent():
    """prctl(PR_SET_PDEATHSIG, SIGKILL): a world process does not outlive its worker."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False


_set_dumpable(0)
# `-c` puts the working directory first on sys.path: nothing in the scratch directory may shadow a
# library.
if sys.path and sys.path[0] in ("", "."):
    del sys.path[0]

import copy  # noqa: E402
import json  # noqa: E402
import keyword  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import traceback  # noqa: E402

BFCL_VERSION = "2025.8.25"
APPWORLD_VERSION = "0.1.3.post1"
# The head of a prepared task line: its id, then its classes (see prepare_bfcl.py's field order).
TASK_HEAD = re.compile(r'\{"id": ("(?:[^"\\]|\\.)*"), "involved_classes": (\[[^\]]*\])')
BFCL_DEFAULT_DATA = "/agentscope_runtime/training_box/bfcl/multi_turn/multi_turn_processed.jsonl"
BFCL_DEFAULT_SPLITS = "/agentscope_runtime/training_box/bfcl/multi_turn/multi_turn_split_ids.json"
APPWORLD_DATA_HINT = (
    "build the image with `make image-appworld APPWORLD_DATA=images/appworld/data/<dir, "
    "data-0.1.0.bundle or archive>` (see images/README.md)"
)
ERROR_MAX = 2000


class Refused(Exception):
    """A request the worker answers with an error line (400: the caller's mistake; 500: ours)."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


class NotReady(Exception):
    """The library or its data cannot be loaded; the message says how to fix it."""


def one_line(text):
    text = " ".join(str(text).split())
    return text if len(text) <= ERROR_MAX else text[: ERROR_MAX - 3] + "..."


def describe(exc):
    return one_line(f"{type(exc).__name__}: {exc}")


def log(text):
    print(f"training worker: {text}", file=sys.stderr, flush=True)


def _finite(value):
    """`value` with non-finite floats replaced (JSON has none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def send(obj):
    try:
        text = json.dumps(obj, ensure_ascii=False, allow_nan=False, default=str)
    except ValueError:
        text = json.dumps(_finite(obj), ensure_ascii=False, default=str)
    try:
        data = (text + "\n").encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: escape them
        data = (json.dumps(json.loads(text), ensure_ascii=True) + "\n").encode("ascii")
    view = memoryview(data)
    while view:
        written = os.write(_PROTOCOL_FD, view)
        view = view[written:]


def object_field(request, name):
    value = request.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Refused(f"{name} must be an object")
    return value


def message_text(messages, required=True):
    """The assistant message's text: `content` as a string (text parts of a list are joined)."""
    if "content" not in messages:
        if required:
            raise Refused("messages.content is required: send the assistant's message as messages")
        return ""
    content = messages["content"]
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        return "".join(
            part.get("text", "") for part in content if isinstance(part.get("text", ""), str)
        )
    raise Refused("messages.content must be a string")


# ------------------------------------------------------------------------------------------------
# BFCL

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
# Bounds of one step, so that a policy's output cannot make a worker work or grow without end.
CONTENT_MAX = 256 * 1024  # characters of one step's content
CALLS_MAX = 128  # tool calls in one step
RESULTS_MAX = 8 * 1024 * 1024  # characters of one step's results: later calls are not run
STEPS_MAX = 2000  # steps with calls in one episode


def tool_call_blocks(content):
    """The JSON text of each `<tool_call>{...}</tool_call>` block, in order: one linear scan (a
    backtracking pattern is quadratic on a content of repeated openings)."""
    blocks, position = [], 0
    while True:
        start = content.find(TOOL_CALL_OPEN, position)
        if start < 0:
            return blocks
        end = content.find(TOOL_CALL_CLOSE, start + len(TOOL_CALL_OPEN))
        if end < 0:
            return blocks
        inner = content[start + len(TOOL_CALL_OPEN):end].strip()
        if inner.startswith("{") and inner.endswith("}"):
            blocks.append(inner)
        position = end + len(TOOL_CALL_CLOSE)
COMPLETED = "[CONVERSATION_COMPLETED]"
VALUE_DEPTH_MAX = 32
STEP_MODEL = "boxd"  # names this worker's bfcl instances (one process, one episode)


def tools_prompt(functions):
    lines = [
        "\n\n# Tools\n",
        "You may call one or more functions to assist with the user query.\n",
        "You are provided with function signatures within <tools></tools> XML tags:",
        "<tools>",
    ]
    lines += [json.dumps(doc, ensure_ascii=False, separators=(",", ":")) for doc in functions]
    lines += [
        "</tools>\n",
        "Important: Always use only the latest tool list provided, ignoring any functions "
        "mentioned in previous messages.",
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:",
        "<tool_call>",
        '{"name": <function-name>, "arguments": <args-json-object>}',
        "</tool_call>",
    ]
    return "\n".join(lines)


def first_user_text(turn):
    for message in turn or []:
        if isinstance(message, dict) and message.get("role") == "user":
            return message.get("content") or ""
    return ""


def json_value_problem(value, depth=0):
    """Why `value` is not a plain JSON value (None when it is)."""
    if depth > VALUE_DEPTH_MAX:
        return f"values nested deeper than {VALUE_DEPTH_MAX} levels"
    if value is None or isinstance(value, (bool, int, str)):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else "non-finite numbers"
    if isinstance(value, list):
        for item in value:
            problem = json_value_problem(item, depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return "non-string keys"
            problem = json_value_problem(item, depth + 1)
            if problem:
                return problem
        return None
    return f"a {type(value).__name__}"


class Bfcl:
    name = "bfcl"

    def __init__(self):
        # bfcl-eval makes result/ and score/ under BFCL_PROJECT_ROOT at import (by default next to
        # site-packages, which may be read-only): a directory in the scratch directory serves.
        os.environ.setdefault("BFCL_PROJECT_ROOT", os.path.join(os.getcwd(), "bfcl-eval"))
        try:
            import bfcl_eval  # noqa: F401
        except ImportError:
            raise NotReady(
                f"the environment library bfcl_eval is not installed in {sys.executable}: "
                f"pip install --no-deps bfcl-eval=={BFCL_VERSION}"
            )
        try:
            from bfcl_eval.constants import default_prompts
            from bfcl_eval.constants.eval_config import (
                MULTI_TURN_FUNC_DOC_PATH,
                POSSIBLE_ANSWER_PATH,
            )
            from bfcl_eval.constants.executable_backend_config import (
                CLASS_FILE_PATH_MAPPING,
                MULTI_TURN_FUNC_DOC_FILE_MAPPING,
            )
            from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils
        except ImportError as exc:
            raise NotReady(self._missing(exc))
        self.prompts = default_prompts
        self.answer_path = POSSIBLE_ANSWER_PATH
        self.doc_path = MULTI_TURN_FUNC_DOC_PATH
        self.doc_files = MULTI_TURN_FUNC_DOC_FILE_MAPPING
        self.class_modules = CLASS_FILE_PATH_MAPPING
        self.checker = multi_turn_checker
        self.utils = multi_turn_utils
        self.library = f"bfcl-eval {self._version()}"

        self.data_path = os.environ.get("BFCL_DATA_PATH") or BFCL_DEFAULT_DATA
        self.split_path = os.environ.get("BFCL_SPLID_ID_PATH") or BFCL_DEFAULT_SPLITS
        if not os.path.isfile(self.data_path):
            raise NotReady(
                f"BFCL data not found at {self.data_path}: run prepare_bfcl.py --out DIR "
                "(set BFCL_DATA_PATH)"
            )
        if not os.path.isfile(self.split_path):
            raise NotReady(
                f"BFCL split ids not found at {self.split_path}: run prepare_bfcl.py --out DIR "
                "(set BFCL_SPLID_ID_PATH)"
            )
        self.lines = []  # raw task lines, parsed on create
        self.index = {}  # id -> line number
        classes = set()
        try:
            with open(self.data_path, encoding="utf-8") as data:
                for line in data:
                    if not line.strip():
                        continue
                    # A spare worker loads this before every create: prepare_bfcl.py writes the id
                    # and the classes first, so a task is parsed whole only when it is created.
                    head = TASK_HEAD.match(line)
                    if head:
                        task_id, involved = json.loads(head.group(1)), json.loads(head.group(2))
                    else:
                        task = json.loads(line)
                        task_id, involved = task.get("id"), task.get("involved_classes")
                    if task_id is None:
                        task_id = len(self.lines)
                    self.index.setdefault(str(task_id), len(self.lines))
                    classes.update(involved or [])
                    self.lines.append(line)
            with open(self.split_path, encoding="utf-8") as splits:
                self.splits = json.load(splits)
        except (OSError, ValueError) as exc:
            raise NotReady(
                f"BFCL data at {self.data_path} cannot be read ({describe(exc)}): "
                "run prepare_bfcl.py --out DIR again"
            )
        if not isinstance(self.splits, dict):
            raise NotReady(f"BFCL split ids at {self.split_path} are not an object of lists")
        # Import every simulated class the tasks use now, so a missing dependency shows at start.
        import importlib

        for class_name in sorted(classes):
            module = self.class_modules.get(class_name)
            if module is None:
                raise NotReady(f"BFCL data names an unknown class {class_name}: "
                               f"prepare it with bfcl-eval {BFCL_VERSION}")
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise NotReady(self._missing(exc))
        self.task = None  # the episode, once created

    @staticmethod
    def _missing(exc):
        module = getattr(exc, "name", None) or describe(exc)
        return (
            f"bfcl_eval cannot import {module} in {sys.executable}: install the worker's "
            "requirements (pip install -r src/training/requirements.txt)"
        )

    @staticmethod
    def _version():
        # The dist-info directory's name, not importlib.metadata (whose import costs a spare 70 ms).
        import bfcl_eval

        site = os.path.dirname(os.path.dirname(os.path.abspath(bfcl_eval.__file__)))
        try:
            for entry in os.listdir(site):
                if entry.startswith("bfcl_eval-") and entry.endswith(".dist-info"):
                    return entry[len("bfcl_eval-"):-len(".dist-info")]
        except OSError:
            pass
        return "unknown"

    @property
    def count(self):
        return len(self.lines)

    # -- profile

    def profile(self, params):
        split = params.get("split", "train")
        if split is None:
            split = "train"
        if split not in ("train", "val") or not isinstance(self.splits.get(split), list):
            raise Refused(f"unknown split {split!r}: train or val")
        return [str(task_id) for task_id in self.splits[split]]

    # -- create

    def _load(self, task_id):
        number = self.index.get(task_id)
        if number is None and task_id.isascii() and task_id.isdigit() and len(task_id) <= 9:
            number = int(task_id)
        if number is None or number >= len(self.lines):
            raise Refused(f"unknown task {task_id!r} for bfcl: see get_env_profile")
        return json.loads(self.lines[number])

    def _ground_truth(self, task):
        if isinstance(task.get("ground_truth"), list):
            return task["ground_truth"]
        # A file prepared upstream's way has no ground truth: bfcl-eval's own possible answers.
        category = task["id"].rsplit("_", 1)[0]
        path = os.path.join(self.answer_path, f"BFCL_v4_{category}.json")
        try:
            with open(path, encoding="utf-8") as answers:
                for line in answers:
                    answer = json.loads(line)
                    if answer.get("id") == task["id"]:
                        return answer["ground_truth"]
        except OSError:
            pass
        raise Refused(f"no ground truth for BFCL task {task['id']!r}", 500)

    def _class_docs(self, task):
        docs = []
        for class_name in task["involved_classes"]:
            path = os.path.join(self.doc_path, self.doc_files[class_name])
            with open(path, encoding="utf-8") as f:
                docs += [json.loads(line) for line in f if line.strip()]
        return docs

    def _functions(self, task):
        """The task's function docs (prepared, or from bfcl-eval's docs minus held-out ones)."""
        if isinstance(task.get("function"), list):
            return task["function"]
        held = {name for names in (task.get("missed_function") or {}).values() for name in names
                if isinstance(name, str)}
        return [doc for doc in self._class_docs(task) if doc["name"] not in held]

    def _missed(self, task):
        """{turn: [docs]} of a miss_func task (names resolved to docs when given as names)."""
        missed = {}
        by_name = None
        for turn, items in (task.get("missed_function") or {}).items():
            docs = []
            for item in items:
                if isinstance(item, dict):
                    docs.append(item)
                    continue
                if by_name is None:
                    by_name = {doc["name"]: doc for doc in self._class_docs(task)}
                if item in by_name:
                    docs.append(by_name[item])
            missed[str(turn)] = docs
        return missed

    def create(self, task_id, instance_id, params):
        task = self._load(task_id)
        if not task.get("involved_classes") or not str(task.get("id", "")).startswith("multi_turn"):
            raise Refused(
                f"task {task_id!r} is a single-turn BFCL task: this worker serves the multi_turn "
                "categories (point BFCL_DATA_PATH at multi_turn_processed.jsonl)"
            )
        model_name = params.get("model_name", "env_handler")
        if not isinstance(model_name, str):
            raise Refused("params.model_name must be a string")
        ground_truth = self._ground_truth(task)
        missed = self._missed(task)
        functions = self._functions(task)
        task["function"] = functions
        questions = task.get("question") or [[]]
        self.task = task
        self.ground_truth = ground_truth
        self.questions = questions
        self.missed = missed
        self.declared = {doc["name"]: doc for doc in functions}  # what get_info names
        # What a call may name: the task's functions, held-out ones included (bfcl-eval runs them
        # before their turn too, and multi_turn_miss_func_49's ground truth calls one early).
        self.callable = dict(self.declared)
        for docs in self.missed.values():
            self.callable.update((doc["name"], doc) for doc in docs)
        self.turn = 0
        self.turns = [[]]  # per turn, per step: the call strings that ran
        self.completed = False
        self.model_name = re.sub(r"[-./]", "_", model_name)
        self.scores = 0
        return {
            "state": [
                {"role": "system", "content": tools_prompt(functions)},
                {"role": "user", "content": first_user_text(questions[0])},
            ],
            "info": {
                "instance_id": instance_id,
                "task_id": task_id,
                "test_id": task.get("id", "unknown"),
                "tools_count": len(functions),
                "questions_count": len(questions),
            },
        }

    # -- step

    def _check_call(self, name, arguments):
        """The call string for bfcl to evaluate, or an error text for the policy."""
        if not isinstance(name, str):
            return None, "Error: a call's name must be a string"
        doc = self.callable.get(name)
        if doc is None or not name.isidentifier():
            return None, f"Error: {name!r} is not one of this task's functions"
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except (ValueError, RecursionError):
                return None, f"Error: the arguments of {name!r} are not valid JSON"
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return None, f"Error: the arguments of {name!r} must be a JSON object"
        parameters = (doc.get("parameters") or {}).get("properties") or {}
        parts = []
        for key, value in arguments.items():
            if not key.isidentifier() or keyword.iskeyword(key) or key not in parameters:
                return None, f"Error: {key!r} is not a parameter of {name!r}"
            problem = json_value_problem(value)
            if problem:
                return None, f"Error: the arguments of {name!r} hold {problem}"
            parts.append(f"{key}={value!r}")
        return f"{name}({', '.join(parts)})", None

    def _execute(self, calls):
        task = self.task
        long_context = "long_context" in task["id"] or "composite" in task["id"]
        results, _ = self.utils.execute_multi_turn_func_call(
            func_call_list=calls,
            initial_config=task.get("initial_config") or {},
            involved_classes=task["involved_classes"],
            model_name=STEP_MODEL,
            test_entry_id=task["id"],
            long_context=long_context,
            is_evaL_run=False,
        )
        return results

    def step(self, messages, params):
        content = message_text(messages)
        if self.completed:
            raise Refused("the episode is over ([CONVERSATION_COMPLETED]): evaluate or release it")
        if len(content) > CONTENT_MAX:
            raise Refused(f"messages.content has {len(content)} characters; a step takes at most "
                          f"{CONTENT_MAX}")
        calls = []
        for block in tool_call_blocks(content):
            try:
                call = json.loads(block)
            except (ValueError, RecursionError):
                continue
            if isinstance(call, dict) and "name" in call and "arguments" in call:
                calls.append(call)
        if not calls:
            return self._end_turn()
        if len(calls) > CALLS_MAX:
            raise Refused(f"{len(calls)} tool calls in one step; at most {CALLS_MAX}")
        if sum(len(steps) for steps in self.turns) >= STEPS_MAX:
            raise Refused(f"the episode has had {STEPS_MAX} steps with calls, the most it takes: "
                          "evaluate or release it")

        checked = [self._check_call(call["name"], call["arguments"]) for call in calls]
        # One call at a time, so that results past RESULTS_MAX stop the step before more run.
        ran, outcomes, size = [], [], 0
        for text, error in checked:
            if text is None:
                outcomes.append(error)
            elif size > RESULTS_MAX:
                outcomes.append(f"Error: not run: this step's results passed {RESULTS_MAX} "
                                "characters; send the rest in another step")
            else:
                result = self._execute([text])[0]
                ran.append(text)
                size += len(result) if isinstance(result, str) else len(repr(result))
                outcomes.append(result)
        if ran:
            self.turns[self.turn].append(ran)
        answer = []
        for number, (call, result) in enumerate(zip(calls, outcomes), start=1):
            if isinstance(result, str) and result.strip().startswith(("{", "[")):
                try:
                    result = json.loads(result)
                except ValueError:
                    pass
            entry = {"name": f"{call['name']}_{number}", "content": result}
            answer.append(f"<tool_call>\n{json.dumps(entry, ensure_ascii=False, default=str)}\n"
                          "</tool_call>\n")
        return {
            "state": [{"role": "user", "content": "".join(answer), "tool_calls": []}],
            "reward": 0.0,
            "is_terminated": False,
            "info": {},
        }

    def _end_turn(self):
        following = self.turn + 1
        if following >= len(self.questions):
            self.completed = True
            return {
                "state": [{"role": "user", "content": COMPLETED, "tool_calls": []}],
                "reward": float(self._score()[0]),
                "is_terminated": True,
                "info": {},
            }
        self.turn = following
        self.turns.append([])
        added = self.missed.get(str(following))
        if added:
            for doc in added:
                self.declared[doc["name"]] = doc
            docs = "\n".join(json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
                             for doc in added)
            text = self.prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING.format(
                functions=f"<tools>\n{docs}\n</tools>"
            )
        else:
            text = first_user_text(self.questions[following])
        return {
            "state": [{"role": "user", "content": text, "tool_calls": []}],
            "reward": 0.0,
            "is_terminated": False,
            "info": {},
        }

    # -- evaluate

    def _score(self):
        """(accuracy, why it is not 1) of the episode so far."""
        ground_truth = self.ground_truth
        if len(self.turns) != len(ground_truth):
            return 0.0, (f"{len(self.turns)} of {len(ground_truth)} turns reached")
        # The checker keeps its instances in multi_turn_utils' globals under the model name: a fresh
        # name per evaluation, removed afterwards, so evaluating twice never reuses a state.
        self.scores += 1
        name = f"{STEP_MODEL}_score{self.scores}"
        space = vars(self.utils)
        before = set(space)
        task = copy.deepcopy(self.task)
        try:
            verdict = self.checker.multi_turn_checker(
                copy.deepcopy(self.turns),
                copy.deepcopy(ground_truth),
                task,
                task["id"].rsplit("_", 1)[0],
                name,
            )
        except Exception as exc:
            log("bfcl evaluation failed:\n" + traceback.format_exc())
            raise Refused(f"bfcl evaluation failed: {describe(exc)}", 500)
        finally:
            for key in set(space) - before:
                space.pop(key, None)
        if verdict.get("valid"):
            return 1.0, None
        return 0.0, verdict.get("error_message") or verdict.get("error_type")

    def evaluate(self, messages, params):
        accuracy, why = self._score()
        if why:
            log(f"bfcl score 0 for {self.task['id']}: {one_line(why)}")
        if params.get("sparse"):
            return accuracy
        test_id = self.task["id"]
        return {
            "valid": True,
            "accuracy": accuracy,
            "total_count": 1,
            "correct_count": int(accuracy),
            "test_category": test_id.rsplit("_", 1)[0],
            "test_id": test_id,
            "model_name": self.model_name,
            "input_tokens": 0,
            "output_tokens": 0,
            "turn_count": self.turn,
            "completed": self.completed,
        }

    def get_info(self, messages, params):
        return "Available tools:\n" + "\n".join(f"- {name}" for name in self.declared)


# ------------------------------------------------------------------------------------------------
# AppWorld

CODE_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
OPEN_CODE_BLOCK = re.compile(r".*?```python\n(.*)", re.DOTALL)
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
DATASET_NAME = re.compile(r"[A-Za-z0-9_]+")

APPWORLD_PROMPT = """I am your supervisor, and you are an AI assistant who completes my day-to-day \
tasks on your own, by operating apps (spotify, venmo, gmail, ...) through their APIs on my behalf.

You work in a Python REPL: each of your messages holds one block of code, written as
```python
<code>
```
(or a call of the tool `appworld` with {{"code": "<code>"}}); the environment runs it and answers \
with its output, and you continue from there until the task is done. Variables persist between \
steps.

Three APIs explain the others:
```python
print(apis.api_docs.show_app_descriptions())  # the apps you can use
print(apis.api_docs.show_api_descriptions(app_name='spotify'))  # the APIs of an app
print(apis.api_docs.show_api_doc(app_name='spotify', api_name='login'))  # one API's specification
```
{instructions}"""

APPWORLD_INSTRUCTIONS = """
Key instructions:
1. Look at an API's specification (apis.api_docs.show_api_doc) before calling it; call APIs only \
as documented, as apis.<app>.<api>(...).
2. Write small chunks of code, one per step, and check that each works before any irreversible \
change.
3. Many APIs return results in pages: go through all the pages with page_index.
4. The "supervisor" app holds my personal information, account passwords, addresses and payment \
cards; the people I mention are the contacts of my "phone" app.
5. Any file system in a task is the file_system app, not the machine's files; only the standard \
library is available, and OS-level modules are disabled.
6. For the current date and time use datetime.now() or the phone app; temporal requests use whole \
days (00:00:00 to 23:59:59) in one default time zone.
7. Decide on your own; do not ask me for clarifications.
8. When the task is done, call apis.supervisor.complete_task(), with answer=<answer> when the \
task asks for information (just the entity or number, e.g. answer=10), or status="fail" if it \
cannot be done.

Now solve the actual task.
My name is: {first_name} {last_name}. My personal email is {email} and my phone number is \
{phone_number}."""


class AppWorldEnv:
    name = "appworld"

    def __init__(self):
        if os.environ.get("BOXD_TRAINING_OWN_ROOT") == "1":
            self._own_root()
        self.world_process = None
        try:
            import appworld

            if getattr(appworld, "__file__", None) is None:  # a bare directory named appworld
                raise ImportError("not a package", name="appworld")
        except ImportError as exc:
            if getattr(exc, "name", None) not in (None, "appworld"):
                raise NotReady(
                    f"appworld cannot import {exc.name} in {sys.executable}: "
                    f"pip install appworld=={APPWORLD_VERSION}"
                )
            raise NotReady(
                f"the environment library appworld is not installed in {sys.executable}: "
                f"pip install appworld=={APPWORLD_VERSION} && appworld install"
            )
        from appworld.common.path_store import path_store

        self.lib = appworld
        self.library = f"appworld {getattr(appworld, '__version__', 'unknown')}"
        self.data = path_store.data
        tasks = os.path.join(self.data, "tasks")
        datasets = os.path.join(self.data, "datasets")
        if not os.path.isdir(tasks) or not os.path.isdir(datasets):
            raise NotReady(f"AppWorld task data not installed (no {tasks}): {APPWORLD_DATA_HINT}")
        import importlib.util

        try:
            installed = importlib.util.find_spec("appworld.apps.supervisor") is not None
        except ImportError:
            installed = False
        if not installed:
            raise NotReady(
                f"AppWorld apps not unpacked in {sys.executable} (appworld install): "
                f"{APPWORLD_DATA_HINT}"
            )
        self.tasks_dir = tasks
        self.datasets_dir = datasets
        self.count = sum(1 for entry in os.scandir(tasks) if entry.is_dir())
        self.world = None

    @staticmethod
    def _own_root():
        """An APPWORLD_ROOT of this worker's own (boxd gives each instance a uid and a home): the shared
        root's entries (data, ...) linked in, and experiments/ a directory of its own, so no instance
        reads or edits another's saved state (AppWorld writes it under ROOT/experiments/outputs)."""
        shared = os.environ.get("APPWORLD_ROOT") or ""
        own = os.path.join(os.getcwd(), "appworld")
        os.makedirs(os.path.join(own, "experiments"), mode=0o700, exist_ok=True)
        if shared and os.path.isdir(shared):
            for entry in os.listdir(shared):
                link = os.path.join(own, entry)
                if entry != "experiments" and not os.path.lexists(link):
                    os.symlink(os.path.join(shared, entry), link)
        os.environ["APPWORLD_ROOT"] = own

    def _datasets(self):
        return sorted(entry.name[:-4] for entry in os.scandir(self.datasets_dir)
                      if entry.name.endswith(".txt"))

    def profile(self, params):
        split = params.get("split", "train")
        if split is None:
            split = "train"
        known = self._datasets()
        if split == "val" and "val" not in known and "dev" in known:
            split = "dev"
        if not isinstance(split, str) or not DATASET_NAME.fullmatch(split) or split not in known:
            raise Refused(f"unknown split {split!r}: {', '.join(known) or 'no datasets installed'}")
        return list(self.lib.load_task_ids(split))

    def create(self, task_id, instance_id, params):
        if not DATASET_NAME.fullmatch(task_id) or not os.path.isdir(
            os.path.join(self.tasks_dir, task_id)
        ):
            raise Refused(f"unknown task {task_id!r} for appworld: see get_env_profile")
        simple = params.get("simple", False)
        prompt = params.get("prompt", True)
        if not isinstance(simple, bool) or not isinstance(prompt, bool):
            raise Refused("params.simple and params.prompt must be booleans")
        if SAFE_NAME.fullmatch(instance_id) and instance_id not in (".", ".."):
            experiment = instance_id
        else:
            import hashlib

            experiment = "boxd_" + hashlib.sha256(instance_id.encode("utf-8")).hexdigest()[:16]
        world_process = WorldProcess(self)
        try:
            # No policy code has run yet: this answer is the world's own.
            data = world_process.call("create", task_id, instance_id, experiment, simple, prompt)
        except Refused:
            world_process.close()
            raise
        self.world_process, self.task_id, self.experiment = world_process, task_id, experiment
        return data

    # -- in the world process (see WorldProcess): the world, and the policy's code

    def world_open(self, task_id, instance_id, experiment, simple, prompt):
        try:
            world = self.lib.AppWorld(task_id=task_id, experiment_name=experiment)
        except Exception as exc:
            log("AppWorld failed to load the task:\n" + traceback.format_exc())
            raise Refused(f"appworld could not load task {task_id!r}: {describe(exc)}", 500)
        self.world, self.task_id, self.experiment = world, task_id, experiment
        self.simple = simple
        supervisor = world.task.supervisor
        person = {key: getattr(supervisor, key, "") for key in
                  ("first_name", "last_name", "email", "phone_number")}
        instructions = APPWORLD_INSTRUCTIONS.format(**person)
        if prompt:
            system = APPWORLD_PROMPT.format(instructions=instructions)
        else:
            system = instructions.strip()
        return {
            "state": [
                {"role": "system", "content": system},
                {"role": "user", "content": world.task.instruction},
            ],
            "info": {"instance_id": instance_id, "task_id": task_id},
        }

    def _run(self, code):
        output = self.world.execute(code)
        if not isinstance(output, str):
            output = str(output)
        return output if self.simple else "Output:\n```\n" + output + "```\n\n"

    @staticmethod
    def _code_of(content):
        match = CODE_BLOCK.search(content)
        if match:
            return match.group(1).strip()
        match = OPEN_CODE_BLOCK.match(content)
        return match.group(1).strip() if match else ""

    def world_step(self, messages):
        """Runs the step's code; {"content": the outputs, "completed": the task says it is done}."""
        content = message_text(messages, required=False)
        tool_calls = messages.get("tool_calls") or []
        if not isinstance(tool_calls, list):
            raise Refused("messages.tool_calls must be a list")
        if "content" not in messages and not tool_calls:
            raise Refused("messages.content or messages.tool_calls is required")
        outputs = []
        if not tool_calls:
            code = self._code_of(content)
            if code:
                outputs.append(self._run(code))
            elif self.simple and content.strip():
                outputs.append(self._run(content))
        for call in tool_calls:
            if not isinstance(call, dict):
                raise Refused("each of messages.tool_calls must be an object")
            function = call.get("function") if isinstance(call.get("function"), dict) else {}
            name = call.get("name") or function.get("name")
            arguments = call.get("arguments", function.get("arguments"))
            if name != "appworld":
                outputs.append(f"tool {name!r} not found: the only tool is appworld, with "
                               'arguments {"code": "<python code>"}')
                continue
            try:
                if isinstance(arguments, str):
                    arguments = json.loads(arguments)
                code = arguments["code"]
                if not isinstance(code, str):
                    raise TypeError("code must be a string")
            except Exception as exc:
                outputs.append(f"tool call error of appworld: its arguments must be a JSON object "
                               f'{{"code": "<python code>"}} ({describe(exc)})')
                continue
            outputs.append(self._run(code))
        return {"content": "\n".join(outputs), "completed": bool(self.world.task_completed())}

    def world_info(self):
        apps = getattr(self.world.task, "app_descriptions", None) or {}
        lines = [
            "Available tools:",
            '- appworld: runs Python code in this task\'s AppWorld REPL; arguments {"code": '
            '"<python code>"} (or one ```python block in the message)',
            "Apps, called as apis.<app>.<api>(...) inside that code:",
        ]
        lines += [f"- {app}: {description}" for app, description in dict(apps).items()]
        return "\n".join(lines)

    # -- in the worker: what reaches boxd

    def step(self, messages, params):
        ran = self.world_process.call("step", messages)
        # The world process ran the policy's code: its answer is data, checked, never a reward.
        if (not isinstance(ran, dict) or not isinstance(ran.get("content"), str)
                or not isinstance(ran.get("completed"), bool)):
            self.world_process.broken("a step answer of the wrong shape")
        terminated = ran["completed"]
        reward = float(self.evaluate({}, params)) if terminated else 0.0
        return {
            "state": [{"role": "user", "content": ran["content"], "tool_calls": []}],
            "reward": reward,
            "is_terminated": terminated,
            "info": {},
        }

    def evaluate(self, messages, params):
        try:
            from appworld.evaluator import evaluate_task

            tracker = evaluate_task(
                task_id=self.task_id,
                experiment_name=self.experiment,
                suppress_errors=True,
                save_report=False,
            )
            passes, failures = len(tracker.passes), len(tracker.failures)
        except Exception as exc:
            log("appworld evaluation failed:\n" + traceback.format_exc())
            raise Refused(f"appworld evaluation failed: {describe(exc)}", 500)
        if params.get("sparse") or passes + failures == 0:
            return float(failures == 0)
        return passes / (passes + failures)

    def get_info(self, messages, params):
        info = self.world_process.call("get_info")
        if not isinstance(info, str):
            self.world_process.broken("a get_info answer that is not text")
        return info


WORLD_ANSWER_MAX = 32 * 1024 * 1024  # bytes of one answer line from a world process
STALE_MAX = 64  # answers to no request skipped before one call's answer


class WorldProcess:
    """An AppWorld world in a forked child, where the policy's code runs (see "Who can write the
    answers" above). Requests and answers are JSON lines over a socket pair; this side bounds and
    type-checks what comes back. The child is in the worker's process group (boxd's kill reaches it)
    and dies with the worker."""

    def __init__(self, env):
        import socket

        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # the world process
            code = 0
            try:
                ours.close()
                os.close(_PROTOCOL_FD)
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.close(null)
                _die_with_parent()
                WorldProcess._serve(env, theirs)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        theirs.close()
        self.pid = pid
        self.socket = ours
        self.answers = ours.makefile("rb")
        self.number = 0  # of the last request

    @staticmethod
    def _serve(env, channel):
        requests = channel.makefile("rb")
        # Named as boxd's ops, so that an error reads as it did when the world ran in the worker.
        ops = {"create": env.world_open, "step": env.world_step, "get_info": env.world_info}
        while True:
            line = requests.readline()
            if not line:
                return
            op = None
            try:
                request = json.loads(line)
                op, number = request["op"], request["number"]
                answer = {"ok": True, "data": ops[op](*request["args"])}
            except Refused as exc:
                answer = {"ok": False, "status": exc.status, "error": one_line(exc)}
            except Exception as exc:
                log(f"appworld {op} failed:\n" + traceback.format_exc())
                answer = {"ok": False, "status": 500,
                          "error": one_line(f"appworld {op} failed: {describe(exc)}")}
            answer["number"] = number
            text = json.dumps(_finite(answer), ensure_ascii=True, default=str)
            channel.sendall(text.encode("ascii") + b"\n")

    def call(self, op, *args):
        """The answer to `op`. Each request is numbered and its answer carries the number: the policy
        can write lines of its own into the channel, and a line not numbered as the request (one it
        wrote, or an answer its lines pushed back) is skipped, up to STALE_MAX of them; at worst it
        forges the text of its own step, never a reward (the caller computes that)."""
        self.number += 1
        try:
            line = json.dumps({"op": op, "args": list(args), "number": self.number},
                              ensure_ascii=True, default=str)
            self.socket.sendall(line.encode("ascii") + b"\n")
            for _ in range(STALE_MAX):
                answer = self._read()
                number = answer.get("number")
                if type(number) is int and number == self.number:
                    break
            else:
                self.broken(f"more than {STALE_MAX} answers to no request")
        except OSError as exc:
            self.broken(f"the channel failed ({describe(exc)})")
        if answer.get("ok") is True:
            return answer.get("data")
        status = answer.get("status")
        error = answer.get("error")
        raise Refused(one_line(error) if isinstance(error, str) else "appworld failed",
                      status if status in (400, 500) else 500)

    def _read(self):
        answer = self.answers.readline(WORLD_ANSWER_MAX + 1)
        if not answer:
            self.broken("it exited")
        if not answer.endswith(b"\n"):
            self.broken(f"an answer longer than {WORLD_ANSWER_MAX} bytes")
        try:
            answer = json.loads(answer)
        except (ValueError, RecursionError):
            self.broken("an answer that is not JSON")
        if not isinstance(answer, dict):
            self.broken("an answer that is not an object")
        return answer

    def broken(self, why):
        """The world process is gone or broke its protocol: the instance cannot go on, so the worker
        ends (boxd answers that the instance is gone)."""
        log(f"the AppWorld world process broke: {why}; the worker exits")
        self.close()
        os._exit(1)

    def close(self):
        import signal

        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except OSError:
            pass
        self.socket.close()


# ------------------------------------------------------------------------------------------------
# The loop

ENVIRONMENTS = {"bfcl": Bfcl, "appworld": AppWorldEnv}


class Worker:
    def __init__(self, env):
        self.env = env
        self.instance = None  # (instance_id, task_id) once created

    def handle(self, request):
        op = request.get("op")
        if not isinstance(op, str):
            raise Refused("the request has no op")
        params = object_field(request, "params")
        if op == "profile":
            if self.instance:
                raise Refused(f"this worker serves instance {self.instance[0]!r}: "
                              "profile is asked of an idle worker")
            return self.env.profile(params)
        if op == "create":
            if self.instance:
                raise Refused(f"this worker already serves instance {self.instance[0]!r} "
                              f"(task {self.instance[1]!r})")
            task_id = request.get("task_id")
            if isinstance(task_id, int) and not isinstance(task_id, bool):
                task_id = str(task_id)
            if not isinstance(task_id, str) or not task_id:
                raise Refused("task_id is required")
            instance_id = request.get("instance_id")
            if not isinstance(instance_id, str) or not instance_id:
                raise Refused("instance_id is required")
            data = self.env.create(task_id, instance_id, params)
            self.instance = (instance_id, task_id)
            return data
        if op in ("step", "evaluate", "get_info"):
            if not self.instance:
                raise Refused(f"{op} before create: this worker has no instance")
            if op == "step" and not isinstance(request.get("messages"), dict):
                raise Refused("messages must be an object (the assistant's message)")
            messages = object_field(request, "messages")
            return getattr(self.env, op)(messages, params)
        raise Refused(f"unknown op {op!r}: profile, create, step, evaluate or get_info")

    def answer(self, line):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            return {"ok": False, "status": 400, "error": "malformed request line: not UTF-8"}
        try:
            request = json.loads(text)
        except (ValueError, RecursionError) as exc:
            return {"ok": False, "status": 400,
                    "error": f"malformed request line: not JSON ({describe(exc)})"}
        if not isinstance(request, dict):
            return {"ok": False, "status": 400,
                    "error": "malformed request line: not a JSON object"}
        op = request.get("op")
        try:
            return {"ok": True, "data": self.handle(request)}
        except Refused as exc:
            return {"ok": False, "status": exc.status, "error": one_line(exc)}
        except Exception as exc:
            log(f"{self.env.name} {op} failed:\n" + traceback.format_exc())
            return {"ok": False, "status": 500,
                    "error": one_line(f"{self.env.name} {op} failed: {describe(exc)}")}


def main():
    args = sys.argv[1:]
    name = None
    if "--env" in args and args.index("--env") + 1 < len(args):
        name = args[args.index("--env") + 1]
    if name not in ENVIRONMENTS:
        send({"ready": False,
              "error": f"unknown environment {name!r}: --env bfcl or --env appworld"})
        return 0
    try:
        env = ENVIRONMENTS[name]()
    except NotReady as exc:
        send({"ready": False, "error": one_line(exc)})
        return 0
    except Exception as exc:
        log(f"the {name} environment failed to load:\n" + traceback.format_exc())
        send({"ready": False, "error": one_line(f"the {name} environment failed to load: "
                                                f"{describe(exc)}")})
        return 0
    send({"ready": True, "env": name, "library": env.library, "tasks": env.count})
    worker = Worker(env)
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return 0
        if not line.strip():
            send({"ok": False, "status": 400, "error": "malformed request line: empty"})
            continue
        send(worker.answer(line))


if __name__ == "__main__":
    try:
        code = main()
    except BrokenPipeError:  # boxd went away
        code = 0
    sys.exit(code)
