"""Build-time helpers used by setup.py and scripts/dev_build.sh (plain Python, no torch)."""
