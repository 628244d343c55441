"""Where the workflow files a run: one definition for the plan (results/) and the store (paper_artifacts/).
Imports nothing, so the workflow's plan loads without pandas or torch."""


def run_subfolder(experiment: str, setting: str, algorithm: str, seed: int | str) -> str:
    """Where the workflow files a run below a runs folder (results/<name>/runs, paper_artifacts/<name>/runs)."""
    return f"{experiment}/{setting}/{algorithm}/seed{seed}"
