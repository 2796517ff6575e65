"""Prepares BFCL tasks for boxd's training worker from the data bfcl-eval bundles (build time).

    python prepare_bfcl.py --out DIR [--subset multi_turn ...]

writes, per subset, `DIR/{subset}_processed.jsonl` (one task a line) and
`DIR/{subset}_split_ids.json` ({"train": [ids], "val": [ids]}), and prints the counts. Running it
again rewrites the same files.

The tasks and the split are those of agentscope-runtime's BFCL preprocessing, so task ids and
splits match upstream's images: a subset's categories sorted by name, each category's tasks in
file order, no shuffle, the first half train and the rest val (multi_turn: train =
multi_turn_base_0..199 + multi_turn_long_context_0..199, val = multi_turn_miss_func_* +
multi_turn_miss_param_*). Like upstream, only the categories its file table names are read (the
table predates bfcl-eval's simple_python / simple_java / simple_javascript files, and memory,
web_search and format_sensitivity need more than a task file), so those are in no subset.

Each line is bfcl-eval's task (id, question, and for multi-turn tasks initial_config, path,
involved_classes) with
- function: the gorilla-style docs of the involved classes, a miss_func task's held-out functions
  removed (multi-turn; single-turn tasks carry their own),
- missed_function: {turn: [docs]} for miss_func tasks,
- ground_truth: the possible answer (per turn, the calls as strings), where bfcl-eval has one.
"""

import argparse
import json
import os
import sys
import tempfile

SUBSETS = ["all", "all_scoring", "multi_turn", "single_turn", "live", "non_live", "python"]
DEFAULT_SUBSETS = SUBSETS
# The categories upstream's preprocessing reads (its file table).
UPSTREAM_CATEGORIES = {
    "irrelevance",
    "live_irrelevance",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_relevance",
    "live_simple",
    "multi_turn_base",
    "multi_turn_long_context",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multiple",
    "parallel",
    "parallel_multiple",
}
TRAIN_RATIO = 0.5


def load_lines(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def category_tasks(category, cache):
    """The processed tasks of one category (cached: subsets share categories)."""
    if category in cache:
        return cache[category]
    from bfcl_eval.constants.eval_config import POSSIBLE_ANSWER_PATH, PROMPT_PATH
    from bfcl_eval.utils import populate_test_cases_with_predefined_functions

    tasks = load_lines(os.path.join(PROMPT_PATH, f"BFCL_v4_{category}.json"))
    tasks = populate_test_cases_with_predefined_functions(tasks)
    answer_file = os.path.join(POSSIBLE_ANSWER_PATH, f"BFCL_v4_{category}.json")
    if os.path.exists(answer_file):
        answers = {answer["id"]: answer["ground_truth"] for answer in load_lines(answer_file)}
        for task in tasks:
            if task["id"] in answers:
                task["ground_truth"] = answers[task["id"]]
    cache[category] = tasks
    return tasks


def leading_id(task):
    """The task with `id` and `involved_classes` first: the worker reads them from a line's head
    without parsing the rest (it indexes every task at start)."""
    head = {key: task[key] for key in ("id", "involved_classes") if key in task}
    return {**head, **task}


def write_atomically(path, text):
    temporary = f"{path}.tmp{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(temporary, path)


def prepare(out, subsets):
    from bfcl_eval.constants.category_mapping import TEST_COLLECTION_MAPPING

    os.makedirs(out, exist_ok=True)
    cache = {}
    counts = {}
    for subset in subsets:
        categories = sorted(set(TEST_COLLECTION_MAPPING[subset]) & UPSTREAM_CATEGORIES)
        tasks = [task for category in categories for task in category_tasks(category, cache)]
        if not tasks:
            print(f"{subset}: no tasks (skipped)")
            continue
        train_size = int(len(tasks) * TRAIN_RATIO)
        splits = {
            "train": [task["id"] for task in tasks[:train_size]],
            "val": [task["id"] for task in tasks[train_size:]],
        }
        data_path = os.path.join(out, f"{subset}_processed.jsonl")
        split_path = os.path.join(out, f"{subset}_split_ids.json")
        write_atomically(
            data_path, "".join(json.dumps(leading_id(task), ensure_ascii=False) + "\n" for task in tasks)
        )
        write_atomically(split_path, json.dumps(splits, ensure_ascii=False, indent=2) + "\n")
        counts[subset] = (len(tasks), len(splits["train"]), len(splits["val"]))
        print(f"{subset}: {len(tasks)} tasks (train {len(splits['train'])}, "
              f"val {len(splits['val'])}) -> {data_path}")
    return counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for the prepared files")
    parser.add_argument(
        "--subset", action="append", choices=SUBSETS,
        help=f"a subset to prepare (repeatable; default: {' '.join(DEFAULT_SUBSETS)})",
    )
    args = parser.parse_args(argv)
    # bfcl-eval makes result/ and score/ under BFCL_PROJECT_ROOT when imported (by default next to
    # site-packages): a throw-away directory here.
    with tempfile.TemporaryDirectory() as scratch:
        os.environ.setdefault("BFCL_PROJECT_ROOT", scratch)
        try:
            import bfcl_eval  # noqa: F401
        except ImportError:
            sys.exit(f"bfcl_eval is not installed in {sys.executable}: "
                     "pip install --no-deps bfcl-eval==2025.8.25")
        prepare(args.out, args.subset or DEFAULT_SUBSETS)


if __name__ == "__main__":
    main()
