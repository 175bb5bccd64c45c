"""The demo: a simulated fleet (`simulate`) and `loopguard up`."""
