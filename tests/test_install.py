"""The tested set of versions: constraints.txt pins every dependency within pyproject's ranges, CI
installs from it, and it is what the environment running these tests has."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]


def pins() -> dict[str, str]:
    """constraints.txt as {normalised name: version}."""
    lines = [line.strip() for line in (REPO / "constraints.txt").read_text().splitlines()]
    pairs = [line.split("==") for line in lines if line and not line.startswith("#")]
    assert all(len(pair) == 2 for pair in pairs), "every line of constraints.txt is NAME==VERSION"
    return {canonicalize_name(name): version for name, version in pairs}


def requirements() -> list[Requirement]:
    """The project's dependencies and those of every extra (pyproject.toml)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    texts = project["dependencies"] + [text for extra in project["optional-dependencies"].values() for text in extra]
    return [Requirement(text) for text in texts]


def test_every_dependency_is_pinned_within_its_range() -> None:
    pinned = pins()
    for requirement in requirements():
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} is not pinned in constraints.txt"
        assert requirement.specifier.contains(pinned[name]), f"{requirement.name}=={pinned[name]} is outside {requirement}"


def test_the_pins_are_the_versions_installed_here() -> None:
    """The tests run on the pinned set. A CPU-only torch (version 2.x.y+cpu) counts as its public version;
    a pinned package that is not installed is allowed only beyond the project's own requirements (e.g.
    the CUDA libraries, which a CPU-only torch does not pull in)."""
    own = {canonicalize_name(requirement.name) for requirement in requirements()}
    for name, version in pins().items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            assert name not in own, f"{name} is a requirement of the project but not installed"
            continue
        assert Version(installed).public == Version(version).public, f"{name}: {installed} installed, {version} pinned"


def test_ci_installs_the_pinned_set() -> None:
    assert 'pip install -e ".[test]" -c constraints.txt' in (REPO / ".ci" / "run").read_text()
