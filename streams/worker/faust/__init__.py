"""Every private Faust name LoopGuard touches, with why and the upstream issue (one place)."""
