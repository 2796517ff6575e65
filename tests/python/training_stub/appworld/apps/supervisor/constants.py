from typing import Literal

TASK_STATUS_LITERAL = Literal["success", "failure"]
