import os


class PathStore:
    """As the real one: the root is APPWORLD_ROOT, else the working directory."""

    def __init__(self) -> None:
        self.reload()

    def reload(self) -> None:
        self.root = os.environ.get("APPWORLD_ROOT", os.getcwd())
        os.environ["APPWORLD_ROOT"] = self.root

    @property
    def data(self) -> str:
        self.reload()
        return os.path.join(self.root, "data")

    @property
    def experiment_outputs(self) -> str:
        self.reload()
        return os.path.join(self.root, "experiments", "outputs")


path_store = PathStore()
