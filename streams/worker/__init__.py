"""The worker: the Faust app, its agent, its lifecycle and the checks around it."""
