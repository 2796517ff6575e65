import json
import os

from appworld.common.path_store import path_store
from appworld.task import Task


class TestTracker:
    def __init__(self) -> None:
        self.passes: list[dict] = []
        self.failures: list[dict] = []


def evaluate_task(
    task_id: str,
    experiment_name: str = "default",
    suppress_errors: bool = True,
    save_report: bool = True,
) -> TestTracker:
    task = Task.load(task_id)
    state_path = os.path.join(
        path_store.experiment_outputs, experiment_name, "tasks", task_id, "dbs", "state.json"
    )
    with open(state_path) as f:
        state = json.load(f)
    tracker = TestTracker()
    for requirement, passed in (
        ("the task is marked completed", state["status"] == "success"),
        ("the answer is right", state["answer"] == task.ground_truth.answer),
    ):
        (tracker.passes if passed else tracker.failures).append({"requirement": requirement})
    return tracker
