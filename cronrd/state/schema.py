"""The replicated state's SQLite schema (one database per node)."""

from ..model.run_states import FINAL

SCHEMA_VERSION = 6

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(
    key TEXT PRIMARY KEY,
    value
);
CREATE TABLE IF NOT EXISTS jobs(
    name TEXT PRIMARY KEY,
    digest TEXT NOT NULL,            -- the definition in force (specs.digest)
    source TEXT NOT NULL,
    paused INTEGER NOT NULL DEFAULT 0,
    cursor INTEGER NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    conflict TEXT                    -- NULL while every source node agrees
);
-- `status` counts the paused jobs and lists the conflicts: from these, not
-- a scan of 100,000 rows at each call.
CREATE INDEX IF NOT EXISTS jobs_paused ON jobs(name) WHERE paused != 0;
CREATE INDEX IF NOT EXISTS jobs_conflict ON jobs(name) WHERE conflict IS NOT NULL;
-- Job definitions, once each, by job name and the sha256 of their canonical
-- JSON: the same job on every node of a cluster is one row, not one per
-- node. (Keyed by name first: a file's jobs are written in order, not at
-- random places of an index of digests.)
CREATE TABLE IF NOT EXISTS specs(
    name TEXT NOT NULL,
    digest TEXT NOT NULL,
    spec TEXT NOT NULL,
    UNIQUE(name, digest)
);
-- The definitions with an SLA: the leader's SLA watch finds them every few
-- seconds without reading every definition (runtime/leader/sla_watch.py, sla_jobs;
-- a query must repeat the predicate to use the index).
CREATE INDEX IF NOT EXISTS specs_sla ON specs(name, digest)
    WHERE instr(spec, '"sla":') > 0;
-- Each node's own definition of a job (the file in its jobs_dir), as the
-- digest of its definition; the row in jobs is the version they all agree on.
CREATE TABLE IF NOT EXISTS job_sources(
    name TEXT NOT NULL,
    node TEXT NOT NULL,
    digest TEXT NOT NULL,
    source TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY(name, node)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS job_sources_file ON job_sources(node, source);
-- The job files each node's jobs of job_sources came from, by content: a
-- file whose bytes (and cronrd's reading of them) did not change since is
-- not parsed again at start or reload. Only files without problems.
CREATE TABLE IF NOT EXISTS source_files(
    node TEXT NOT NULL,
    path TEXT NOT NULL,
    digest TEXT NOT NULL,            -- sha256 of the file's bytes and the parser version
    jobs INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY(node, path)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS source_files_digest ON source_files(digest);
-- Job files a node is parsing now, by digest (SyncJobs.claims): a node
-- with the same bytes waits for that node's source_files record and copies
-- it rather than parse the same file too. Gone when the look ends.
CREATE TABLE IF NOT EXISTS file_claims(
    digest TEXT PRIMARY KEY,
    node TEXT NOT NULL,
    path TEXT NOT NULL,
    at REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS nodes(
    node TEXT PRIMARY KEY,
    state TEXT NOT NULL,             -- joining | up | draining
    addr TEXT NOT NULL,
    tags TEXT NOT NULL,              -- JSON list, sorted
    since REAL NOT NULL              -- when it entered this state
);
CREATE TABLE IF NOT EXISTS runs(
    run_id INTEGER PRIMARY KEY,
    job TEXT NOT NULL,
    origin TEXT NOT NULL,            -- schedule | manual
    kind TEXT NOT NULL,              -- scheduled | catchup | manual | retry | backfill | rerun
    fire_time INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    target TEXT NOT NULL DEFAULT '', -- node key for per-node runs, '' otherwise
    state TEXT NOT NULL,
    node TEXT,                       -- NULL while pending (the leader places it)
    token INTEGER,                   -- log index of the assignment (fencing)
    due_at REAL,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    pid INTEGER,
    exit_code INTEGER,
    signal INTEGER,
    log_path TEXT,
    reason TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    assigned_at REAL,                -- when its current placement was committed
    claimed_at REAL,                 -- when its node's claim was committed: the
                                     -- node may start it (NULL: it has not)
    moved_from TEXT                  -- nodes it was taken from unclaimed, in order
);
-- Guarantee 1: exactly one record per scheduled (job, fire_time[, node], attempt).
CREATE UNIQUE INDEX IF NOT EXISTS runs_key
    ON runs(job, fire_time, target, attempt) WHERE origin = 'schedule';
CREATE INDEX IF NOT EXISTS runs_job ON runs(job, run_id);
-- A job's successes by when they ended: a child's `within` finds its parent's
-- newest one without reading its other records (state/dependencies.py).
CREATE INDEX IF NOT EXISTS runs_succeeded ON runs(job, finished_at)
    WHERE state = 'succeeded';
-- The runs that may still change: the states of run_states.ACTIVE, in its
-- order (a query uses a partial index only with the same term). An index
-- made before the waiting state is remade (StateMachine.migrate).
CREATE INDEX IF NOT EXISTS runs_active ON runs(state)
    WHERE state IN ('pending', 'assigned', 'running', 'waiting');
-- The runs that ended, by when: with runs_active, every run a picture of a
-- span of time can show (state/activity.py), without reading the rest of
-- the history. It holds what those pictures read (no lookup of the record).
CREATE INDEX IF NOT EXISTS runs_ended ON runs(finished_at, job, kind, fire_time, attempt,
    state, node, started_at) WHERE finished_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS gaps(
    gap_id INTEGER PRIMARY KEY,
    job TEXT NOT NULL,
    first INTEGER NOT NULL,
    last INTEGER NOT NULL,
    count INTEGER NOT NULL,
    reason TEXT NOT NULL,
    created_at REAL NOT NULL
);
-- Reports that arrived for an attempt that was no longer current (stale
-- fencing token): kept as history, never allowed to overwrite the run.
CREATE TABLE IF NOT EXISTS late_reports(
    report_id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL,
    node TEXT NOT NULL,
    token INTEGER NOT NULL,
    state TEXT NOT NULL,
    exit_code INTEGER,
    signal INTEGER,
    finished_at REAL,
    log_path TEXT,
    received_index INTEGER NOT NULL
);
-- Who asked for which change over a control socket, allowed or refused
-- (`cronrd audit`). Pruned with the run history.
CREATE TABLE IF NOT EXISTS audit(
    audit_id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    node TEXT NOT NULL,              -- the node whose socket took the request
    uid INTEGER NOT NULL,
    user TEXT NOT NULL,
    pid INTEGER NOT NULL,
    command TEXT NOT NULL,
    target TEXT NOT NULL,
    allowed INTEGER NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_at ON audit(at);
-- What the peer port refuses whatever the certificate's signature says: node
-- ids taken out with `cluster remove` (until added again) and certificate
-- serials (a removed node's, or one replaced by `cluster rotate-cert`).
CREATE TABLE IF NOT EXISTS denied(
    kind TEXT NOT NULL,              -- node | serial
    value TEXT NOT NULL,
    at REAL NOT NULL,
    reason TEXT NOT NULL,
    PRIMARY KEY(kind, value)
);
-- One-time join tokens (`cluster add NODE ADDR --token`): only the token's
-- sha256 is replicated; the token is shown once, to the operator.
-- Why a job is paused and who paused it (`cronrd pause JOB --note`); the
-- row named '' is the maintenance pause of every job (`cronrd pause --all`).
CREATE TABLE IF NOT EXISTS pauses(
    name TEXT PRIMARY KEY,
    note TEXT NOT NULL,
    by TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS join_tokens(
    node TEXT PRIMARY KEY,
    hash TEXT NOT NULL,
    addr TEXT NOT NULL,
    at REAL NOT NULL
);
-- Dependencies (state/dependencies.py): each child's parents in force
-- (derived from its definition, kept by apply), the parent run each child
-- consumed last and the parent's newest outcome committed since (new to the
-- child, in commit order: runs may end out of order), and each child run's
-- lineage.
CREATE TABLE IF NOT EXISTS job_deps(
    parent TEXT NOT NULL,
    child TEXT NOT NULL,
    PRIMARY KEY(parent, child)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS job_deps_child ON job_deps(child);
CREATE TABLE IF NOT EXISTS dep_cursors(
    child TEXT NOT NULL,
    parent TEXT NOT NULL,
    run_id INTEGER NOT NULL,         -- the parent run the child consumed last (0: none)
    new_run_id INTEGER,              -- the parent's newest outcome committed since (NULL: none)
    PRIMARY KEY(child, parent)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS dep_cursors_parent ON dep_cursors(parent);
CREATE TABLE IF NOT EXISTS run_lineage(
    run_id INTEGER NOT NULL,
    parent_job TEXT NOT NULL,
    parent_run_id INTEGER NOT NULL,
    PRIMARY KEY(run_id, parent_job)
) WITHOUT ROWID;
-- Who consumed a parent run (`--downstream` walks the lineage forwards; a
-- per-node parent's outcome for a fire time is delivered once:
-- state/dependencies.py, fire_time_outcome).
CREATE INDEX IF NOT EXISTS run_lineage_parent ON run_lineage(parent_run_id);
-- Backfills (`cronrd backfill`): a replicated object the leader's duties
-- release, at most `parallel` runs at once, until done (state/backfill.py).
CREATE TABLE IF NOT EXISTS backfills(
    id INTEGER PRIMARY KEY,
    job TEXT NOT NULL,
    from_time INTEGER NOT NULL,
    to_time INTEGER NOT NULL,
    reprocess TEXT NOT NULL,         -- missing | failed | all
    parallel INTEGER NOT NULL,
    ord TEXT NOT NULL,               -- oldest | newest
    state TEXT NOT NULL,             -- running | paused | done | cancelled
    note TEXT NOT NULL,
    who TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    total INTEGER NOT NULL,          -- fire times in the range
    planned_skips INTEGER NOT NULL,  -- of them, skipped when it was created
    downstream INTEGER NOT NULL DEFAULT 0  -- 1: --downstream (ADDED_COLUMNS)
);
CREATE INDEX IF NOT EXISTS backfills_open ON backfills(job) WHERE state IN ('running', 'paused');
-- Each fire time of a backfill: waiting, released (its run record made or
-- reprocessed: run_id is that attempt), done (outcome: the last attempt's
-- state), skipped (note says why) or cancelled.
CREATE TABLE IF NOT EXISTS backfill_items(
    backfill INTEGER NOT NULL,
    fire_time INTEGER NOT NULL,
    state TEXT NOT NULL,
    note TEXT NOT NULL DEFAULT '',
    run_id INTEGER,
    outcome TEXT,
    PRIMARY KEY(backfill, fire_time)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS backfill_items_state ON backfill_items(backfill, state, fire_time);
-- `--downstream` of a rerun or backfill (state/downstream.py): the records
-- that consumed its fire time, under the run id of the attempt that started
-- it (root): waiting (for waits_on items of the set), released (run_id: its
-- new attempt), done, or not_rerun (note says why); fresh counts the items
-- it waited for that ran again. The edges: which item waits for which.
CREATE TABLE IF NOT EXISTS downstream_items(
    root INTEGER NOT NULL,
    job TEXT NOT NULL,
    fire_time INTEGER NOT NULL,
    waits_on INTEGER NOT NULL,
    fresh INTEGER NOT NULL,
    state TEXT NOT NULL,
    run_id INTEGER,
    note TEXT NOT NULL,
    PRIMARY KEY(root, job, fire_time)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS downstream_items_record ON downstream_items(job, fire_time)
    WHERE state IN ('waiting', 'released');
CREATE TABLE IF NOT EXISTS downstream_edges(
    root INTEGER NOT NULL,
    parent_job TEXT NOT NULL,
    parent_fire_time INTEGER NOT NULL,
    child_job TEXT NOT NULL,
    child_fire_time INTEGER NOT NULL,
    PRIMARY KEY(root, parent_job, parent_fire_time, child_job, child_fire_time)
) WITHOUT ROWID;
-- Events for notifications (state/events.py): the replicated outbox. An
-- event's id is the same on every node (receivers dedupe on it); delivered
-- is set once every recipient got it or was given up on.
CREATE TABLE IF NOT EXISTS events(
    event_id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    job TEXT NOT NULL,
    fire_time INTEGER,
    run_id INTEGER,
    at REAL NOT NULL,
    data TEXT NOT NULL,              -- JSON
    delivered INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS events_undelivered ON events(event_id) WHERE delivered = 0;
-- Jobs whose last final outcome was a failure (state/run_events.py): their
-- next success is one "recovered" event. event_id: the first failure's.
-- target: the node of a run_on: all job's runs (each recovers on its own).
CREATE TABLE IF NOT EXISTS failing_jobs(
    job TEXT NOT NULL,
    target TEXT NOT NULL,
    event_id INTEGER NOT NULL,
    since REAL NOT NULL,
    PRIMARY KEY(job, target)
) WITHOUT ROWID;
-- A run's delivered events go with its record (pruned by age or by
-- history_max_runs_per_job), so a job skipping every second does not keep
-- a month of events; an undelivered one stays until delivered.
CREATE INDEX IF NOT EXISTS events_run ON events(run_id) WHERE run_id IS NOT NULL;
CREATE TRIGGER IF NOT EXISTS runs_pruned_events AFTER DELETE ON runs BEGIN
    DELETE FROM events WHERE run_id = OLD.run_id AND delivered = 1;
END;
-- Each attempt to deliver an event to a notifier (state/deliveries.py), as
-- the leader that made it recorded it through the log (DeliveryResult).
CREATE TABLE IF NOT EXISTS deliveries(
    event_id INTEGER NOT NULL,
    notifier TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    at REAL NOT NULL,
    ok INTEGER NOT NULL,             -- 1 sent, 0 failed
    final INTEGER NOT NULL,          -- 1: no more attempts (sent, or given up)
    error TEXT NOT NULL,
    leader TEXT NOT NULL,
    PRIMARY KEY(event_id, notifier, attempt)
) WITHOUT ROWID;
-- Alerts (state/alerts.py): one per (job, fire time, kind) -- SLA misses
-- the leader proposes, failures apply opens -- open until acked or resolved.
CREATE TABLE IF NOT EXISTS alerts(
    alert_id INTEGER PRIMARY KEY,
    job TEXT NOT NULL,
    fire_time INTEGER NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL,
    opened_at REAL NOT NULL,
    state TEXT NOT NULL,             -- open | acked | resolved
    note TEXT NOT NULL,
    by TEXT NOT NULL,
    closed_at REAL,
    event_id INTEGER,
    UNIQUE(job, fire_time, kind)
);
CREATE INDEX IF NOT EXISTS alerts_open ON alerts(job) WHERE state = 'open';
-- Runs that failed their last retry under on_final_failure: dead_letter,
-- until requeued (a new attempt of the record) or discarded.
CREATE TABLE IF NOT EXISTS dead_letter(
    run_id INTEGER PRIMARY KEY,
    job TEXT NOT NULL,
    fire_time INTEGER NOT NULL,
    at REAL NOT NULL,
    state TEXT NOT NULL,             -- open | requeued | discarded
    note TEXT NOT NULL,
    by TEXT NOT NULL,
    closed_at REAL,
    requeue_run_id INTEGER
);
-- Every pause and resume of a job (name '': the maintenance pause), kept
-- after the resume: `cronrd explain JOB --at T` says who paused it and why
-- at a past T. Pruned with the run history.
CREATE TABLE IF NOT EXISTS pause_log(
    event_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    paused INTEGER NOT NULL,         -- 1 paused, 0 resumed
    note TEXT NOT NULL,
    by TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS pause_log_name ON pause_log(name, at);
-- Each retry's predecessor (machine.py _end_run): `run-now --wait` follows
-- its own run's retries even when two manual runs of a job share a fire time.
CREATE TABLE IF NOT EXISTS run_retries(
    run_id INTEGER PRIMARY KEY,      -- the attempt that ended
    retry_run_id INTEGER NOT NULL    -- the attempt that retries it
);
-- A run's parameters and idempotency key (`run-now --param k=v --key KEY`),
-- per attempt; only runs that have either have a row (run_params.py).
CREATE TABLE IF NOT EXISTS run_params(
    run_id INTEGER PRIMARY KEY,
    params TEXT NOT NULL,            -- JSON {name: canonical text}
    key TEXT                         -- the --key, NULL without one
);
-- The latest attempt of the run each (job, --key) made: a key makes one run.
CREATE TABLE IF NOT EXISTS run_keys(
    job TEXT NOT NULL,
    key TEXT NOT NULL,
    run_id INTEGER NOT NULL,
    PRIMARY KEY(job, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS run_keys_run ON run_keys(run_id);
-- The runs held by `concurrency: queue` (state 'waiting'), one row each,
-- per job and target in fire-time order: the first is released when the
-- job has no run pending, assigned or running (state/queue.py).
CREATE TABLE IF NOT EXISTS run_queue(
    run_id INTEGER PRIMARY KEY,
    job TEXT NOT NULL,
    target TEXT NOT NULL,
    fire_time INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS run_queue_order ON run_queue(job, target, fire_time, run_id);
-- A job's runs in flight (state/queue.py), without a walk over its history.
CREATE INDEX IF NOT EXISTS runs_live_job ON runs(job, target)
    WHERE state IN ('pending', 'assigned', 'running', 'waiting');
-- Pools (state/pools.py): the leader's daemon config's pools in force (SetPools),
-- and each run of a job with a pool: the slots it takes, its priority, and
-- whether it waits for them (state waiting) or holds them (pending, assigned,
-- running: a node-scoped pool counts only assigned and running, by node).
CREATE TABLE IF NOT EXISTS pools(
    name TEXT PRIMARY KEY,
    slots INTEGER NOT NULL,
    scope TEXT NOT NULL              -- cluster | node
);
CREATE TABLE IF NOT EXISTS pool_runs(
    run_id INTEGER PRIMARY KEY,
    pool TEXT NOT NULL,
    slots INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    late INTEGER NOT NULL,           -- 1: a backfill run (after the on-time runs)
    fire_time INTEGER NOT NULL,
    waiting INTEGER NOT NULL         -- 1: waits for its slots
);
CREATE INDEX IF NOT EXISTS pool_runs_order ON pool_runs(pool, waiting, late, priority,
                                                        fire_time, run_id);
-- Checkpoints and heartbeats from inside a job (state/checkpoints.py): each
-- attempt's token, as its sha256 (the token itself is only in the run's
-- environment), reported with its start, and its last heartbeat.
CREATE TABLE IF NOT EXISTS run_heartbeats(
    run_id INTEGER PRIMARY KEY,
    token_hash TEXT NOT NULL,
    heartbeat_at REAL,               -- NULL until its first heartbeat
    progress REAL,                   -- 0..1, NULL: never said
    message TEXT
);
-- The last checkpoint of each record (job, origin, fire time, node key),
-- saved by one of its attempts; a retry starts with it.
CREATE TABLE IF NOT EXISTS checkpoints(
    job TEXT NOT NULL,
    origin TEXT NOT NULL,
    fire_time INTEGER NOT NULL,
    target TEXT NOT NULL,
    value TEXT NOT NULL,             -- at most 64 KiB of UTF-8
    attempt INTEGER NOT NULL,        -- the attempt that saved it
    run_id INTEGER NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY(job, origin, fire_time, target)
) WITHOUT ROWID;
-- HTTP API tokens (state/tokens.py), by name: the sha256 of each secret only.
CREATE TABLE IF NOT EXISTS api_tokens(
    name TEXT PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,              -- viewer | operator | admin
    jobs TEXT NOT NULL,              -- a glob of job names, '' for every job
    expires_at REAL,                 -- NULL: never
    created_at REAL NOT NULL,
    node TEXT NOT NULL               -- where it was made
) WITHOUT ROWID;
-- The web UI's sessions (state/tokens.py): a browser's cookie holds a
-- secret of its own, never the token's; only its sha256 is kept. Bound to
-- the token as it was at login (its hash): a revoked token ends them.
-- Cluster version 2 on: empty before.
CREATE TABLE IF NOT EXISTS ui_sessions(
    hash TEXT PRIMARY KEY,           -- sha256 hex of the session's secret
    name TEXT NOT NULL,              -- the token's name
    token_hash TEXT NOT NULL,        -- ... and its hash at login
    expires_at REAL NOT NULL,
    created_at REAL NOT NULL,
    node TEXT NOT NULL               -- where the browser logged in
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ui_sessions_expiry ON ui_sessions(expires_at);
CREATE INDEX IF NOT EXISTS ui_sessions_token ON ui_sessions(name, created_at);
-- Worker agents the leader registered (runtime/cluster/worker_hub.py):
-- not Raft members; the leader places runs on them like on members.
-- Cluster version 2 on: empty before.
CREATE TABLE IF NOT EXISTS workers(
    node TEXT PRIMARY KEY,           -- its certificate's name
    tags TEXT NOT NULL,              -- JSON list, sorted (executor:... offered included)
    capacity INTEGER NOT NULL,       -- its max_running
    version TEXT NOT NULL,           -- the cronrd it runs
    since REAL NOT NULL              -- registered (or its tags last changed)
) WITHOUT ROWID;
-- One-off runs planned for a later time (`run-now --at`; state/planned.py).
-- Cluster version 2 on: empty before.
CREATE TABLE IF NOT EXISTS planned_runs(
    plan_id INTEGER PRIMARY KEY,     -- the PlanRun's log index
    job TEXT NOT NULL,
    due REAL NOT NULL,               -- when it starts
    params TEXT NOT NULL,            -- canonical JSON of its --param values
    key TEXT NOT NULL,               -- its --key ('' for none)
    by TEXT NOT NULL,                -- who planned it
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS planned_runs_due ON planned_runs(due, plan_id);
CREATE INDEX IF NOT EXISTS planned_runs_job ON planned_runs(job, due);
-- The calendars in force (the leader's daemon config, resolved to days:
-- state/calendars.py). Cluster version 2 on: empty before.
CREATE TABLE IF NOT EXISTS calendars(
    name TEXT PRIMARY KEY,
    body TEXT NOT NULL               -- canonical JSON of Calendar.to_dict()
) WITHOUT ROWID;
-- The runs of watches that wait for a ping (state/apply_watches.py), with
-- when their grace ends; a row goes when its run ends. Cluster version 2 on.
CREATE TABLE IF NOT EXISTS watch_waits(
    run_id INTEGER PRIMARY KEY,
    job TEXT NOT NULL,
    until REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS watch_waits_until ON watch_waits(until);
-- Pings no fire time of their watch waited for (a clock a little fast: the
-- fire time a few seconds later takes them; state/apply_watches.py).
CREATE TABLE IF NOT EXISTS watch_strays(
    run_id INTEGER PRIMARY KEY,
    job TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS watch_strays_job ON watch_strays(job, at);
-- Nodes an admin drained (state/node_drains.py): no new runs go there.
CREATE TABLE IF NOT EXISTS node_drains(
    node TEXT PRIMARY KEY,
    at REAL NOT NULL,
    by TEXT NOT NULL,                -- who drained it (e.g. token 'ops')
    note TEXT NOT NULL
) WITHOUT ROWID;
-- How many runs of each job ended how (/metrics: cronrd_job_runs_total and
-- cronrd_job_skips_total), counted by triggers as a record reaches a final
-- state, so they only grow: pruning old records leaves them. ``reason``: for
-- skipped runs the leading word of the reason (overlap, max_running,
-- start_deadline, upstream_skipped, ...; 'other' when it has none), else ''.
CREATE TABLE IF NOT EXISTS job_outcomes(
    job TEXT NOT NULL,
    origin TEXT NOT NULL,            -- schedule | manual
    outcome TEXT NOT NULL,           -- a final run state
    reason TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY(job, origin, outcome, reason)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS runs_outcome_new AFTER INSERT ON runs
WHEN NEW.state IN (FINAL_STATES) BEGIN
    INSERT INTO job_outcomes(job, origin, outcome, reason, n)
    VALUES (NEW.job, NEW.origin, NEW.state, REASON_CODE, 1)
    ON CONFLICT(job, origin, outcome, reason) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER IF NOT EXISTS runs_outcome_ended AFTER UPDATE OF state ON runs
WHEN NEW.state IN (FINAL_STATES) AND OLD.state NOT IN (FINAL_STATES) BEGIN
    INSERT INTO job_outcomes(job, origin, outcome, reason, n)
    VALUES (NEW.job, NEW.origin, NEW.state, REASON_CODE, 1)
    ON CONFLICT(job, origin, outcome, reason) DO UPDATE SET n = n + 1;
END;
-- The run duration and schedule delay histograms of each job (/metrics:
-- cronrd_job_run_duration_seconds, cronrd_job_schedule_delay_seconds), one
-- row per job and metric, kept by triggers as records start and end: a
-- scrape reads one row per job, never the run history, and pruning records
-- leaves the counts. b0..b9: how many observations were <= each bound of
-- HISTOGRAM_BUCKETS[metric] (cumulative, as Prometheus has them); count is
-- the +Inf bucket. duration: finished_at - started_at of a run that ended
-- having started; delay: started_at - fire_time of a scheduled attempt 1
-- (kind 'scheduled': catch-up, backfill, retry and manual runs are late by
-- design).
CREATE TABLE IF NOT EXISTS job_histograms(
    job TEXT NOT NULL,
    metric TEXT NOT NULL,            -- duration | delay
    b0 INTEGER NOT NULL, b1 INTEGER NOT NULL, b2 INTEGER NOT NULL, b3 INTEGER NOT NULL,
    b4 INTEGER NOT NULL, b5 INTEGER NOT NULL, b6 INTEGER NOT NULL, b7 INTEGER NOT NULL,
    b8 INTEGER NOT NULL, b9 INTEGER NOT NULL,
    sum REAL NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY(job, metric)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS runs_duration AFTER UPDATE OF state ON runs
WHEN NEW.state IN (FINAL_STATES) AND OLD.state NOT IN (FINAL_STATES)
     AND NEW.started_at IS NOT NULL AND NEW.finished_at IS NOT NULL BEGIN
    OBSERVE_DURATION;
END;
CREATE TRIGGER IF NOT EXISTS runs_delay AFTER UPDATE OF started_at ON runs
WHEN OLD.started_at IS NULL AND NEW.started_at IS NOT NULL AND NEW.kind = 'scheduled' BEGIN
    OBSERVE_DELAY;
END;
-- How each notifier's delivery attempts went (/metrics:
-- cronrd_notifications_total): sent, failed (another attempt follows) or
-- given_up (the last attempt failed); counted as attempts are recorded, so
-- pruning deliveries with their events leaves the counts.
CREATE TABLE IF NOT EXISTS notify_outcomes(
    notifier TEXT NOT NULL,
    outcome TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY(notifier, outcome)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS deliveries_outcome AFTER INSERT ON deliveries BEGIN
    INSERT INTO notify_outcomes(notifier, outcome, n)
    VALUES (NEW.notifier, NOTIFY_OUTCOME, 1)
    ON CONFLICT(notifier, outcome) DO UPDATE SET n = n + 1;
END;
-- Open dead-letter entries per job (/metrics: cronrd_job_dead_letter).
CREATE INDEX IF NOT EXISTS dead_letter_open ON dead_letter(job) WHERE state = 'open';
"""

# The bounds (seconds) of the per-job histograms' buckets: ten each, the
# columns b0..b9 of job_histograms (changing them needs a migration).
HISTOGRAM_BUCKETS = {
    "duration": (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 86400.0),
    "delay": (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0, 300.0),
}
_HIST_COLS = ", ".join(f"b{i}" for i in range(10))


def _observe(metric: str, value: str, row: str = "NEW") -> str:
    """The upsert adding one observation ``value`` (SQL over ``row``)."""
    v = value.replace("R.", f"{row}.")
    cells = ", ".join(f"({v}) <= {b!r}" for b in HISTOGRAM_BUCKETS[metric])
    sets = ", ".join(f"b{i} = b{i} + excluded.b{i}" for i in range(10))
    return (f"INSERT INTO job_histograms(job, metric, {_HIST_COLS}, sum, count) "
            f"VALUES ({row}.job, '{metric}', {cells}, {v}, 1) "
            f"ON CONFLICT(job, metric) DO UPDATE SET {sets}, sum = sum + excluded.sum, "
            f"count = count + 1")


DURATION_SQL = "MAX(0.0, R.finished_at - R.started_at)"
DELAY_SQL = "MAX(0.0, R.started_at - R.fire_time)"
NOTIFY_OUTCOME_SQL = ("CASE WHEN R.ok THEN 'sent' WHEN R.final THEN 'given_up' "
                      "ELSE 'failed' END")

# The leading word of a skipped run's reason (letters and '_' up to the first
# space, ':' or '('), as SQL over the row ``R`` (NEW in the triggers).
_WORD = "(replace(replace(COALESCE(R.reason, ''), ':', ' '), '(', ' ') || ' ')"
_CODE = f"substr({_WORD}, 1, instr({_WORD}, ' ') - 1)"
REASON_CODE_SQL = (f"CASE WHEN R.state != 'skipped' THEN '' WHEN {_CODE} = '' OR {_CODE} "
                   f"GLOB '*[^a-z_]*' THEN 'other' ELSE {_CODE} END")
_FINAL = FINAL
SCHEMA = SCHEMA.replace("FINAL_STATES", ", ".join(f"'{s}'" for s in _FINAL)).replace(
    "REASON_CODE", REASON_CODE_SQL.replace("R.", "NEW.")).replace(
    "OBSERVE_DURATION", _observe("duration", DURATION_SQL)).replace(
    "OBSERVE_DELAY", _observe("delay", DELAY_SQL)).replace(
    "NOTIFY_OUTCOME", NOTIFY_OUTCOME_SQL.replace("R.", "NEW."))
# A database made before job_outcomes: its counts start from the records it holds.
SEED_JOB_OUTCOMES = (
    "INSERT INTO job_outcomes(job, origin, outcome, reason, n) "
    f"SELECT R.job, R.origin, R.state, {REASON_CODE_SQL}, COUNT(*) FROM runs AS R "
    f"WHERE R.state IN ({', '.join(repr(s) for s in _FINAL)}) GROUP BY 1, 2, 3, 4")

# A database made before job_histograms or notify_outcomes: seeded likewise
# (one statement per metric: each upsert adds a record's observation).
SEED_JOB_HISTOGRAMS = tuple(
    f"INSERT INTO job_histograms(job, metric, {_HIST_COLS}, sum, count) "
    f"SELECT R.job, '{metric}', "
    + ", ".join(f"SUM(({sql}) <= {b!r})" for b in HISTOGRAM_BUCKETS[metric])
    + f", SUM({sql}), COUNT(*) FROM runs AS R WHERE {where} GROUP BY R.job"
    for metric, sql, where in (
        ("duration", DURATION_SQL, f"R.state IN ({', '.join(repr(s) for s in _FINAL)}) AND "
         "R.started_at IS NOT NULL AND R.finished_at IS NOT NULL"),
        ("delay", DELAY_SQL, "R.started_at IS NOT NULL AND R.kind = 'scheduled'")))
SEED_NOTIFY_OUTCOMES = (
    "INSERT INTO notify_outcomes(notifier, outcome, n) "
    f"SELECT R.notifier, {NOTIFY_OUTCOME_SQL}, COUNT(*) FROM deliveries AS R GROUP BY 1, 2")

# Migrations from older versions, run before SCHEMA (which then adds new tables:
# version 3 only adds the audit table, version 4 the denied and join_tokens tables).
# Version 5 adds the claim columns of runs (UPGRADE_TO_V5, for a runs table
# that exists already).
UPGRADE_FROM_V1 = """
ALTER TABLE jobs ADD COLUMN conflict TEXT;
DROP INDEX IF EXISTS runs_active;
"""

# Version 6 keeps each definition once (specs) and adds source_files: the
# spec columns of jobs and job_sources move into specs (UPGRADE_TO_V6, run
# before SCHEMA on a version 1 to 5 database).
UPGRADE_TO_V6 = """
CREATE TABLE specs(name TEXT NOT NULL, digest TEXT NOT NULL, spec TEXT NOT NULL,
                   UNIQUE(name, digest));
INSERT OR IGNORE INTO specs(name, digest, spec) SELECT name, digest, spec FROM job_sources;
INSERT OR IGNORE INTO specs(name, digest, spec) SELECT name, digest, spec FROM jobs;
CREATE TABLE job_sources_v6(
    name TEXT NOT NULL, node TEXT NOT NULL, digest TEXT NOT NULL, source TEXT NOT NULL,
    updated_at REAL NOT NULL, PRIMARY KEY(name, node)) WITHOUT ROWID;
INSERT INTO job_sources_v6 SELECT name, node, digest, source, updated_at FROM job_sources;
DROP TABLE job_sources;
ALTER TABLE job_sources_v6 RENAME TO job_sources;
ALTER TABLE jobs DROP COLUMN spec;
"""

# Columns added to a table after it first shipped: (table, column, ALTER),
# added at start where missing (StateMachine.migrate, after SCHEMA).
ADDED_COLUMNS = (
    ("backfills", "downstream",
     "ALTER TABLE backfills ADD COLUMN downstream INTEGER NOT NULL DEFAULT 0"),
)

UPGRADE_TO_V5 = (
    ("assigned_at", "ALTER TABLE runs ADD COLUMN assigned_at REAL"),
    ("claimed_at", "ALTER TABLE runs ADD COLUMN claimed_at REAL"),
    ("moved_from", "ALTER TABLE runs ADD COLUMN moved_from TEXT"),
)

NODE_STATES = ("joining", "up", "draining")  # joining: added, not yet announced
