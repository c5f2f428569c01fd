"""The desk: what pages, /healthz, /metrics and the API read about runs (selectors, the dashboard,
the status board, metrics, incident pages, objective statuses, key search). Read-only; it may import
the engine's read functions, never the other way round (import-linter, pyproject.toml).
"""
