"""The run engine: everything that decides or writes a run's life (claim, admission, lease, execute,
outcome, retry, sweep, operator actions, approvals, retention) and the passes the workers and beat run
beside it (incidents, outages, objectives, the dashboard's rollup, worker heartbeats).

The engine never imports runs.desk (import-linter, pyproject.toml); the desk reads through the
engine's read functions. Where each module sits and why: docs/architecture.md.
"""
