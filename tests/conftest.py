"""Fixtures every suite may use: the built distributions and a wheel installed as users get it.

Session-scoped, so the packaging tests and the installed `up` test of one pytest run share one
build and one virtualenv (tests/packaging/dists.py).
"""

from __future__ import annotations

import pytest

from tests.packaging.dists import Dists, Installed, build, install


@pytest.fixture(scope="session")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    """The sdist and the wheel built from it."""
    return build(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def installed(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel with `[embedded]`, and PyPI's `loopguard`, in a virtualenv outside the checkout."""
    return install(dists.wheel, tmp_path_factory.mktemp("venv"))
