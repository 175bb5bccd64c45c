"""Configuration: the loop-detection policy (OpenClaw JSON5 shape) and the service settings."""

from loopguard_fleet.config.policy import (
    DETECTION_ON,
    DETECTION_ON_TEXT,
    Policy,
    PolicyError,
    PolicyIssue,
    load_policy,
    read_policy_document,
)

# ---- service settings (config/settings.py): import its public names here --------------------

__all__ = [
    # policy (config/policy.py)
    "DETECTION_ON",
    "DETECTION_ON_TEXT",
    "Policy",
    "PolicyError",
    "PolicyIssue",
    "load_policy",
    "read_policy_document",
    # service settings (config/settings.py): add its names here
]

from loopguard_fleet.config.settings import Settings

__all__ += ["Settings"]
