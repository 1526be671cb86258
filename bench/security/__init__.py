"""Attack suites: how far an answer, a rubric or a client can push the judge or the server.

Run one as ``python -m bench.security.NAME`` from the repository root."""
