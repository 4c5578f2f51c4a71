"""The daemon stage: the long-running process that owns the queue and answers on a Unix socket.

What it does: takes the single-instance guard (`instance`), binds the socket, serves the `/v1` JSON API
behind a peer-uid gate (`api`, `gate`; the kernel query is `benchd.peercred`), and runs one sweep at a time from the persistent
queue (`queue`), handing each job to the engine and its runbook to results. `lifecycle` ties these
together with the shutdown order.

May import: every stage below it (results, engine, servers, sensors) and the floor. Nothing imports it
but `benchd.__main__`.

Public names: `run_daemon` (in `lifecycle`), `JobQueue`/`EventHub` (in `queue`), `make_app` (in `api`).
"""
