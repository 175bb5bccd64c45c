"""One exception tree (detectors/errors.py): every error class LoopGuard defines derives from
`LoopGuardError`, the engine's from `DetectorError`, the stream side's from `StreamError`."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator

import pytest

from loopguard_fleet import config, detectors, streams
from loopguard_fleet.detectors import DetectorError, LoopGuardError
from loopguard_fleet.streams.errors import StreamError

ROOTS = {"detectors": DetectorError, "config": LoopGuardError, "streams": StreamError}


def error_classes() -> Iterator[tuple[str, type[BaseException]]]:
    for package in (detectors, config, streams):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            for name, obj in vars(module).items():
                if (
                    inspect.isclass(obj)
                    and issubclass(obj, BaseException)
                    and obj.__module__ == module.__name__
                    and not name.startswith("_")
                ):
                    yield f"{module.__name__}.{name}", obj


ERRORS = sorted(
    (item for item in error_classes() if item[1] is not LoopGuardError),  # the root itself
    key=lambda item: item[0],
)


def test_the_tree_has_the_errors_of_every_layer() -> None:
    layers = {name.split(".")[1] for name, _ in ERRORS}
    assert layers == {"detectors", "config", "streams"}


@pytest.mark.parametrize(("name", "cls"), ERRORS, ids=[name for name, _ in ERRORS])
def test_every_error_has_its_layers_root(name: str, cls: type[BaseException]) -> None:
    assert issubclass(cls, ROOTS[name.split(".")[1]])
