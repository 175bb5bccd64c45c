"""Which engine this test pass runs: the sources by default, the mypyc-compiled modules under
`make test-compiled` (LOOPGUARD_TEST_COMPILED=1, the unpacked wheel first on the path)."""

from __future__ import annotations

import os

COMPILED = os.environ.get("LOOPGUARD_TEST_COMPILED") == "1"  # the pass's claim (checked by
# tests/unit/test_compiled_engine.py against the modules' files)
