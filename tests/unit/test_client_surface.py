"""The runtime SDK's public surface: exactly the documented names, each importable."""

from __future__ import annotations

from loopguard_fleet.streams import client

DOCUMENTED = {
    "MISSING",
    "ClientError",
    "ClientSecurity",
    "Missing",
    "RunEvents",
    "RunHandle",
    "RuntimeClient",
    "Topics",
    "VerdictReply",
}


def test_the_client_exports_exactly_the_documented_names() -> None:
    assert set(client.__all__) == DOCUMENTED
    assert all(hasattr(client, name) for name in client.__all__)


def test_no_public_name_leaks_beyond_all() -> None:
    public = {n for n, v in vars(client).items() if not n.startswith("_")}
    modules = {n for n, v in vars(client).items() if type(v).__name__ == "module"}
    assert public - modules == DOCUMENTED


def test_the_client_needs_no_worker_side_module() -> None:
    # An agent runtime installs the SDK with the package; it must not start Faust.
    import subprocess
    import sys

    probe = (
        "import sys; import loopguard_fleet.streams.client; "
        "print(sorted(m for m in ('faust', 'mode') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
