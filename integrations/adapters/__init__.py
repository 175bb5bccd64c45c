"""Framework adapters: agent frameworks' tool hooks feed LoopGuard and enforce its verdicts.

`core` holds everything the adapters share (event building through `RuntimeClient`, the gate,
fail-open/closed, block and abort messages, the warning note); each framework module only
translates its hook points to the core. docs/integrations.md documents each one.
"""
