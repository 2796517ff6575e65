r"""The BFCL environment of the training worker, joined after protocol.py (see its docstring).

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
"""

import copy
import keyword
import re

BFCL_VERSION = "2025.8.25"
# The head of a prepared task line: its id, then its classes (see prepare_bfcl.py's field order).
TASK_HEAD = re.compile(r'\{"id": ("(?:[^"\\]|\\.)*"), "involved_classes": (\[[^\]]*\])')
BFCL_DEFAULT_DATA = "/agentscope_runtime/training_box/bfcl/multi_turn/multi_turn_processed.jsonl"
BFCL_DEFAULT_SPLITS = "/agentscope_runtime/training_box/bfcl/multi_turn/multi_turn_split_ids.json"

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


ENVIRONMENT = Bfcl
