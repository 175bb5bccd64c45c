"""Audits offline: streaming and parallel replay, explain, compare, the HTML report."""
