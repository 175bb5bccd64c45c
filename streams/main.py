"""Composition root: the only place that reads the environment and builds the worker.

python -m loopguard_fleet.streams.main worker      # same as `loopguard worker`
"""

from __future__ import annotations

import os
import sys

from pydantic import ValidationError

from loopguard_fleet.config.settings import Settings, unknown_variables

__all__ = ["load_settings", "main", "settings_or_report", "worker_main"]


def load_settings() -> Settings:
    """Build `Settings` from the `LOOPGUARD_*` environment (raises ValidationError)."""
    return Settings()


def _report(exc: ValidationError) -> None:
    """Print every invalid setting with its environment variable name."""
    lines = [f"loopguard: {exc.error_count()} invalid setting(s):"]
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(settings)"
        env = f"LOOPGUARD_{field.upper()}" if err["loc"] else "LOOPGUARD_*"
        # A cross-field error's input is every setting, secrets too (docs/security.md).
        got = f" (got {err.get('input')!r})" if err["loc"] else ""
        lines.append(f"  {env}: {err['msg']}{got}")
    sys.stderr.write("\n".join(lines) + "\n")


def settings_or_report() -> Settings | None:
    """`Settings` from the environment, or None after printing every invalid one (a
    misspelled LOOPGUARD_* variable included: ignoring it would silently keep a default)."""
    unknown = unknown_variables(os.environ)
    if unknown:
        lines = [f"loopguard: {len(unknown)} unknown setting(s):", *(f"  {u}" for u in unknown)]
        sys.stderr.write("\n".join(lines) + "\n")
        return None
    try:
        return load_settings()
    except ValidationError as exc:
        _report(exc)
        return None


def worker_main() -> int:
    """Run a worker configured by the environment; 2 on invalid settings."""
    settings = settings_or_report()
    if settings is None:
        return 2
    from loopguard_fleet.streams.worker.run import (
        run_worker,  # after validation: Faust is slow to import
    )

    return run_worker(settings)


def main(argv: list[str] | None = None) -> int:
    """`python -m loopguard_fleet.streams.main worker`."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["worker"]:
        sys.stderr.write("usage: python -m loopguard_fleet.streams.main worker\n")
        return 2
    return worker_main()


if __name__ == "__main__":
    sys.exit(main())
