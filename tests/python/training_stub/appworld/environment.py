import contextlib
import io
import json
import os
import shutil
import traceback
from typing import get_args

from appworld.apps import APP_TO_DESCRIPTION
from appworld.common.path_store import path_store
from appworld.task import Task


class _App:
    def __init__(self, **apis):
        self.__dict__.update(apis)


class AppWorld:
    def __init__(self, task_id: str, experiment_name: str = "default", **_ignored) -> None:
        self.task_id = task_id
        self.experiment_name = experiment_name
        self.task = Task.load(task_id)
        self.output_directory = os.path.join(
            path_store.experiment_outputs, experiment_name, "tasks", task_id
        )
        self.output_db_home_path_on_disk = os.path.join(self.output_directory, "dbs")
        self.db = {"status": None, "answer": None, "executions": 0}
        self.apis = _App(
            api_docs=_App(
                show_app_descriptions=lambda: [
                    {"name": app, "description": APP_TO_DESCRIPTION[app]}
                    for app in self.task.allowed_apps
                ],
            ),
            supervisor=_App(
                show_profile=lambda: dict(vars(self.task.supervisor)),
                complete_task=self._complete_task,
            ),
        )
        self.namespace = {"apis": self.apis}
        shutil.rmtree(self.output_directory, ignore_errors=True)
        os.makedirs(self.output_db_home_path_on_disk, exist_ok=True)
        self._save_state()
        print(f"stand-in AppWorld loaded task {task_id} for experiment {experiment_name}")

    def _complete_task(self, answer=None, status="success"):
        self.db["status"] = status
        self.db["answer"] = answer
        print("Marked the active task complete.")

    def _save_state(self) -> None:
        with open(os.path.join(self.output_db_home_path_on_disk, "state.json"), "w") as f:
            json.dump(self.db, f)

    def execute(self, code: str) -> str:
        code = code.strip()
        if not code:
            return "No code available to execute."
        output = io.StringIO()
        try:
            with contextlib.redirect_stdout(output):
                exec(compile(code, "<python-input>", "exec"), self.namespace)
            message = output.getvalue() or "Execution successful."
        except Exception:
            message = "Execution failed. Traceback:\n" + traceback.format_exc(limit=-1)
        self.db["executions"] += 1
        self._save_state()
        return message

    def task_completed(self) -> bool:
        from appworld.apps.supervisor.constants import TASK_STATUS_LITERAL

        return self.db["status"] in get_args(TASK_STATUS_LITERAL)

    def close(self) -> None:
        pass
