"""Framework adapters: agent frameworks' tool hooks feed LoopGuard and enforce its verdicts.

What the adapters share lives once: `core.LoopGuard` (publishing through `RuntimeClient`, the
gate, fail-open/closed, aborts, block messages), `gate` (its answer for a call, the fields a
verdict carries, the warning note) and `versions` (the import-time version guard). Each
framework module only translates its hook points; docs/integrations.md documents each one.
"""
