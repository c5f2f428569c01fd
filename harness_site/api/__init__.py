"""The REST API under /api/v1/ (docs/api.md): an edge, like the admin. Every decision is a service
call (tasks.services, tasks.triggers.*, runs.engine.operations, deadletters.services); this package only
reads requests, checks the same permissions as the admin, and writes RFC 9457 problem details."""
