import json
import os
from types import SimpleNamespace

from appworld.apps import APP_TO_DESCRIPTION, get_all_apps
from appworld.common.path_store import path_store


class Task:
    def __init__(self, id, instruction, supervisor, datetime, allowed_apps, db_version, answer):
        self.id = id
        self.instruction = instruction
        self.supervisor = supervisor
        self.datetime = datetime
        self.allowed_apps = allowed_apps
        self.db_version = db_version
        self.app_descriptions = {app: APP_TO_DESCRIPTION[app] for app in allowed_apps}
        self.ground_truth = SimpleNamespace(answer=answer, required_apis=["supervisor.complete_task"])

    @classmethod
    def load(cls, task_id: str, **_ignored) -> "Task":
        task_directory = os.path.join(path_store.data, "tasks", task_id)
        if not os.path.exists(task_directory):
            raise Exception(f"The task directory ({task_directory}) doesn't exist.")
        with open(os.path.join(task_directory, "specs.json")) as f:
            specs = json.load(f)
        with open(os.path.join(task_directory, "ground_truth", "answer.json")) as f:
            answer = json.load(f)["answer"]
        return cls(
            id=task_id,
            instruction=specs["instruction"],
            supervisor=SimpleNamespace(**specs["supervisor"]),
            datetime=specs["datetime"],
            allowed_apps=get_all_apps(skip_admin=True),
            db_version=specs["db_version"],
            answer=answer,
        )


def load_task_ids(dataset_name: str = "train", **_ignored) -> list[str]:
    tasks_directory = os.path.join(path_store.data, "tasks")
    if not os.path.exists(tasks_directory):
        raise Exception(f"The task directory ({tasks_directory}) doesn't exist.")
    dataset_file_path = os.path.join(path_store.data, "datasets", dataset_name + ".txt")
    if not os.path.exists(dataset_file_path):
        raise Exception(f"The dataset file ({dataset_file_path}) doesn't exist.")
    with open(dataset_file_path) as f:
        return [line.strip() for line in f if line.strip()]
