"""Stand-in for the real `appworld` package (0.1.3.post1) in boxd's tests: see ../README.md."""
# ruff: noqa: F401
from appworld.common.path_store import path_store
from appworld.environment import AppWorld
from appworld.evaluator import evaluate_task
from appworld.task import load_task_ids

__version__ = "0.1.3.post1"

# The real library prints now and then; a worker must keep such lines off its protocol.
print("appworld stand-in imported")
