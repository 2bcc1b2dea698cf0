"""The worker port: where worker agents (``cronrd worker``) reach the cluster.

A worker is not a Raft member and holds no replicated state (docs/workers.md).
It dials a server's worker port (``cluster.worker_listen``) with a
certificate the cluster CA issued for the worker role; its name is that
certificate's, nothing it says changes it. A follower answers its hello
with the leader's name and closes: workers talk to the leader only.

On the leader, ``WorkerHub``:

- registers the worker (``WorkerInfo``, replicated: every server lists it,
  and a new leader knows its runs belong to a worker);
- sends it the runs assigned to it (at hello, then as the log assigns
  them), and their cancels, ends and moves, from the state machine's effects;
- turns its reports into the commands a member proposes for itself
  (``ClaimRuns``, ``RunStarted``, ``RunFinished``), after the
  speak-only-for-yourself checks: its own name in the command, and no
  report on a run's current attempt when that attempt is another node's.
  Anything else is refused and logged (``event=worker_refused``);
- answers its pings: each answer renews its lease (a worker that has not
  had one within ``lease`` seconds starts nothing new) and carries the
  leader's clock (a worker whose clock is off starts nothing either);
- tells the cluster which workers answer (placement, node loss: a worker
  silent for ``node_timeout`` has its runs declared lost like a member's);
- reads a worker's run logs over its connection (``cronrd logs``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from ... import __version__
from ...decisions.placement import NodeView
from ...errors import (CronrdError, NotLeader, PermissionDenied, Refused, RequestError,
                       StateError)
from ...model.run import Run
from ...state import checkpoints as CK
from ...state import commands as C
from ...state import queries as Q
from ...state import run_params as RP
from ...state import versions as V
from ...state.effects import (CancelRequested, Effect, RunAssigned, RunDone, RunMoved,
                              RunStuck)
from ...state.forwarded import check_forwarded
from ..clock import Clock
from ..peers.tls import cert_is_worker, cert_names, cert_serial, server_context
from ..peers.worker_wire import (MAX_HELLO, MAX_PENDING, MAX_UP_FRAME, Channel, WireError,
                                 answer_error, read_frame, small_tls_buffers)
from ..tasks import wait_within

log = logging.getLogger("cronrd.workers")

PING = 0.5                # s between a worker's pings
RESPONSIVE = 4 * PING     # a worker that answered this recently is alive
HELLO_WAIT = 5.0          # s a new connection has to say hello
REGISTERED_TTL = 1.0      # s the list of registered workers is kept
LOG_WAIT = 5.0            # s a worker has to answer a log read
MAX_BAD = 20              # refused requests on one connection before it is closed
MAX_TAGS = 64
WORKER_OPS = frozenset({C.ClaimRuns.op, C.RunStarted.op, C.RunFinished.op})
RATE_MIN = 200            # proposals a second any worker may make (more with capacity)
MAX_COMMAND = 64 << 10    # bytes of one proposal from a worker
MAX_CLAIMS = 1024         # runs in one claim (and never more than its capacity)
MAX_TEXT = 4096           # characters of a report's reason or log path


def _check_sizes(cmd: C.Command, claims: int) -> None:
    """A worker's report as large as a real one, no larger: every member
    applies what the leader commits, so a claim of 700,000 runs or a
    reason of 4 MB would be everyone's to store and to apply."""
    if isinstance(cmd, C.ClaimRuns) and (not isinstance(cmd.claims, list)
                                         or len(cmd.claims) > claims):
        raise RequestError(f"claim_runs: at most {claims} runs in one claim (the worker's "
                           "capacity)")
    for name in ("reason", "log_path"):
        value = getattr(cmd, name, None)
        if isinstance(value, str) and len(value) > MAX_TEXT:
            raise RequestError(f"{cmd.op}: {name} of {len(value)} characters; at most "
                               f"{MAX_TEXT}")


@dataclass
class Session:
    node: str
    chan: Channel
    tags: tuple[str, ...]
    capacity: int
    version: str
    since: float          # monotonic: connected
    last: float           # monotonic: its last frame
    offset: float | None = None   # its clock minus the leader's, as it measured (s)
    running: int = 0
    serial: str = ""              # its certificate's (a revoked one ends the connection)
    tokens: float = float(RATE_MIN)   # proposals it may make now (_within_rate)
    refilled: float = 0.0             # monotonic: when they were last counted
    bad: int = 0
    tasks: set = field(default_factory=set)


class WorkerHub:
    def __init__(self, node_id: str, conn, clock: Clock, *, listen: tuple[str, int],
                 tls: Any, is_leader: Callable[[], bool], leader: Callable[[], str | None],
                 propose: Callable[[C.Command], Awaitable[Any]],
                 stamp: Callable[[C.Command], C.Command], members: Callable[[], list[str]],
                 node_timeout: float, max_clock_offset: float):
        self.node_id = node_id
        self.conn = conn
        self.clock = clock
        self.listen = listen
        self.tls = tls
        self.is_leader = is_leader
        self.leader = leader
        self.propose = propose
        self.stamp = stamp
        self.members = members
        self.node_timeout = node_timeout
        self.max_clock_offset = max_clock_offset
        # A worker may start runs for this long after a ping it sent was
        # answered; the leader declares it lost only after node_timeout of
        # silence, so half of it leaves the margin of a slow link.
        self.lease = node_timeout / 2
        self.sessions: dict[str, Session] = {}
        self.contact: dict[str, float] = {}   # monotonic: each worker's last frame this term
        self.refused = 0
        self._registered: tuple[float, list[dict]] | None = None
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[asyncio.Task] = set()

    # -- the port ----------------------------------------------------------------
    async def start(self) -> None:
        small_tls_buffers()   # (256 KiB per connection otherwise)
        ctx = server_context(self.tls)
        host, port = self.listen
        self._server = await asyncio.start_server(self._accept, host, port, ssl=ctx,
                                                  ssl_handshake_timeout=HELLO_WAIT)
        log.info("event=worker_port_listening addr=%s:%d", host, port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for s in list(self.sessions.values()):
            s.chan.close()
        for task in list(self._conns):
            task.cancel()
        if self._conns:
            await asyncio.wait(list(self._conns), timeout=2.0)

    def leadership_lost(self) -> None:
        """This node no longer leads: its workers go to the new leader."""
        for s in list(self.sessions.values()):
            s.chan.close()
        self.contact.clear()

    def drop_denied(self) -> None:
        """Close the connections of workers removed from the cluster or
        whose certificate was revoked."""
        if not self.sessions:
            return
        denied = Q.denied(self.conn)
        for node in [n for n, s in self.sessions.items() if n in denied["node"]
                     or (s.serial and s.serial in denied["serial"])]:
            log.warning("event=worker_removed node=%s", node)
            self.sessions[node].chan.close()

    async def _accept(self, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None  # (start_server runs each connection in a task)
        self._conns.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, OSError):
            pass
        finally:
            self._conns.discard(task)
            writer.close()

    def _refuse_peer(self, writer: asyncio.StreamWriter, why: str) -> None:
        peer = writer.get_extra_info("peername")
        self.refused += 1
        log.warning("event=worker_refused from=%s reason=\"%s\"", peer, why)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cert = writer.get_extra_info("peercert")
        names = cert_names(cert)
        if not cert_is_worker(cert):
            # A member's certificate on the worker port: it speaks on the peer port.
            self._refuse_peer(writer, f"certificate {sorted(names)} is not a worker's "
                                      "(OU cronrd-worker); members use the peer port")
            return
        if len(names) != 1:
            self._refuse_peer(writer, f"a worker certificate must name one worker (names "
                                      f"{sorted(names)})")
            return
        node = names.pop()
        chan = Channel(writer)
        try:
            hello = await wait_within(read_frame(reader, MAX_HELLO), HELLO_WAIT)
        except (asyncio.TimeoutError, WireError) as exc:
            self._refuse_peer(writer, f"worker {node}: no hello ({exc or 'timeout'})")
            return
        rid = hello.get("id")
        if hello.get("op") != "hello":
            self._refuse_peer(writer, f"worker {node}: first frame is not a hello")
            return
        serial = cert_serial(cert)
        try:
            self._admit(node, serial)
            session = await self._hello(node, chan, hello)
        except CronrdError as exc:
            chan.send(answer_error(rid, exc))
            await writer.drain()
            if not isinstance(exc, NotLeader):
                self._refuse_peer(writer, f"worker {node}: {exc}")
            return
        session.serial = serial
        try:
            chan.send({"re": rid, "ok": self._welcome(node)})
            log.info("event=worker_connected node=%s tags=%s capacity=%d version=%s", node,
                     ",".join(session.tags), session.capacity, session.version)
            while not chan.closed:
                # A worker pings every PING seconds: silent for node_timeout, it is
                # gone (its runs are declared lost by then); the connection goes too.
                msg = await wait_within(read_frame(reader, MAX_UP_FRAME), self.node_timeout)
                session.last = self.contact[node] = self.clock.monotonic()
                self._dispatch(session, msg)
        except asyncio.TimeoutError:
            log.warning("event=worker_silent node=%s seconds=%g", node, self.node_timeout)
        except WireError as exc:
            log.warning("event=worker_refused node=%s reason=\"%s\"", node, exc)
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, OSError):
            pass
        except Exception:   # a bug here must cost this worker's connection only
            log.exception("event=worker_connection_failed node=%s", node)
        finally:
            chan.close()
            for task in list(session.tasks):
                task.cancel()
            if self.sessions.get(node) is session:
                del self.sessions[node]
                log.info("event=worker_disconnected node=%s", node)

    def _admit(self, node: str, serial: str) -> None:
        """PermissionDenied for a worker this cluster no longer takes (it
        is told why, and logs it)."""
        denied = Q.denied(self.conn)
        if node in denied["node"] or (serial and serial in denied["serial"]):
            raise PermissionDenied(f"worker {node} was removed from the cluster (or its "
                                   "certificate revoked); stop `cronrd worker` there, or issue "
                                   "it a new certificate under a new name")
        if node in self.members():
            raise PermissionDenied(f"worker certificate {node!r} names a member of the "
                                   "cluster; a name is one node's or one worker's")

    async def _hello(self, node: str, chan: Channel, hello: dict) -> Session:
        if not self.is_leader():
            raise NotLeader(self.leader())
        if not V.at_least(self.conn, V.WORKERS):
            raise StateError(f"the cluster runs at version {V.recorded(self.conn)}; workers "
                             f"need cluster version {V.WORKERS} (upgrade every member to "
                             f"cronrd {V.release_of(V.WORKERS)}; the version is raised "
                             "once all run it)")
        tags, capacity, version = hello.get("tags"), hello.get("capacity"), hello.get("version")
        if not (isinstance(tags, list) and len(tags) <= MAX_TAGS and all(
                isinstance(t, str) and 0 < len(t) <= 200 for t in tags)):
            raise RequestError(f"hello: tags must be a list of at most {MAX_TAGS} strings")
        if not (isinstance(capacity, int) and not isinstance(capacity, bool)
                and 0 < capacity <= 100_000):
            raise RequestError("hello: capacity must be a whole number 1..100000")
        if not (isinstance(version, str) and 0 < len(version) <= 64):
            raise RequestError("hello: version must be a short string")
        now = self.clock.monotonic()
        tags_t = tuple(sorted(set(tags)))
        registered = {w["node"]: w for w in Q.workers(self.conn)}.get(node)
        if registered is None or (tuple(registered["tags"]), registered["capacity"],
                                  registered["version"]) != (tags_t, capacity, version):
            await self.propose(C.WorkerInfo(node=node, tags=tags_t, capacity=capacity,
                                            version=version, at=self.clock.now()))
            self._registered = None
        if not self.is_leader():
            raise NotLeader(self.leader())
        old = self.sessions.get(node)
        if old is not None:  # it came back before this side saw it go
            old.chan.close()
        session = Session(node, chan, tags_t, capacity, version, now, now)
        self.sessions[node] = session
        self.contact[node] = now
        return session

    def _welcome(self, node: str) -> dict[str, Any]:
        """The hello's answer: the lease's terms, the leader's clock, the
        runs assigned to the worker (each job's definition once)."""
        runs = Q.runs_for_node(self.conn, node, ("assigned", "running"))
        specs = {job: self._spec(job) for job in {r.job for r in runs}}
        return {"node": node, "leader": self.node_id, "version": __version__,
                "lease": self.lease, "ping": PING, "max_clock_offset": self.max_clock_offset,
                "now": self.clock.now(), "specs": {j: list(v) for j, v in specs.items()},
                "runs": [self.assignment(r, spec=False) for r in runs]}

    def _spec(self, job: str) -> tuple[str | None, str | None]:
        """(definition, source) of ``job`` in force, or (None, None)."""
        for spec, source in self.conn.execute(
                "SELECT spec, source FROM jobs JOIN specs USING(name, digest) WHERE name=?",
                (job,)):
            return spec, source
        return None, None

    def assignment(self, run: Run, spec: bool = True) -> dict[str, Any]:
        """What a worker needs to run ``run``: the run, its job's definition in
        force (``spec``: in this message), its inputs, a retry's checkpoint,
        and the runs of its job running elsewhere (its overlap policy)."""
        params, key, rerun = RP.inputs(self.conn, run)
        out: dict[str, Any] = {}
        if spec:
            out["spec"], out["source"] = self._spec(run.job)
        return {**out, "run": list(run.row()),
                "inputs": [params, key, rerun], "checkpoint": CK.env(self.conn, run),
                "elsewhere": [list(x) for x in Q.running_elsewhere(self.conn, run,
                                                                   run.node or "")]}

    # -- what a worker says ---------------------------------------------------------
    def _dispatch(self, session: Session, msg: dict) -> None:
        if "re" in msg:
            session.chan.answered(msg)
            return
        op, rid = msg.get("op"), msg.get("id")
        if op == "ping":
            if not self.is_leader():   # a deposed leader renews no lease
                session.chan.close()
                return
            offset, running = msg.get("offset"), msg.get("running")
            if isinstance(offset, (int, float)) and not isinstance(offset, bool) \
                    and math.isfinite(offset):
                session.offset = float(offset)
            if isinstance(running, int) and not isinstance(running, bool):
                session.running = max(0, min(running, session.capacity))
            session.chan.send({"re": rid, "ok": {"now": self.clock.now()}})
            return
        if op == "propose" and not self._within_rate(session):
            # Not the worker's fault to count: its reporter asks again shortly.
            session.chan.send(answer_error(rid, StateError(
                f"worker {session.node}: over {self._rate(session):g} proposals a second; "
                "slow down")))
            return
        if op == "propose" and len(session.tasks) < MAX_PENDING:
            task = asyncio.get_running_loop().create_task(
                self._answer(session, rid, msg.get("cmd")))
            session.tasks.add(task)
            task.add_done_callback(session.tasks.discard)
            return
        self._bad(session, rid, RequestError(
            f"{str(op)[:40]!r}: a worker may send hello, ping and propose only"
            if op != "propose" else f"over {MAX_PENDING} proposals unanswered; slow down"))

    @staticmethod
    def _rate(session: Session) -> float:
        """Proposals a second a worker may make: a start and an end report
        per run and its claims, for its capacity's runs every second, and
        room to catch up after a reconnect."""
        return float(max(RATE_MIN, 4 * session.capacity))

    def _within_rate(self, session: Session) -> bool:
        """A token bucket per worker: every member applies what a worker
        has the leader commit, so one worker may not flood the log."""
        now = self.clock.monotonic()
        rate = self._rate(session)
        session.tokens = min(rate, session.tokens + (now - session.refilled) * rate)
        session.refilled = now
        if session.tokens < 1.0:
            return False
        session.tokens -= 1.0
        return True

    def _bad(self, session: Session, rid: Any, exc: CronrdError) -> None:
        session.bad += 1
        self.refused += 1
        log.warning("event=worker_refused node=%s reason=\"%s\"", session.node, exc)
        session.chan.send(answer_error(rid, exc))
        if session.bad >= MAX_BAD:
            log.warning("event=worker_cut_off node=%s reason=\"%d refused requests\"",
                        session.node, session.bad)
            session.chan.close()

    async def _answer(self, session: Session, rid: Any, text: Any) -> None:
        try:
            cmd = self.checked(session.node, text, session.capacity)
            if not self.is_leader():
                raise NotLeader(self.leader())
            result = await self.propose(cmd)
        except PermissionDenied as exc:
            self._bad(session, rid, exc)
            return
        except CronrdError as exc:
            session.chan.send(answer_error(rid, exc))
            return
        except Exception as exc:   # a malformed command's fields (a null time...)
            self._bad(session, rid, RequestError(f"propose: a malformed command "
                                                 f"({type(exc).__name__})"))
            return
        if isinstance(cmd, C.ClaimRuns) and isinstance(result, dict):
            result = {**result, "elsewhere": self._elsewhere(result.get("won") or ())}
        session.chan.send({"re": rid, "ok": result})

    def _elsewhere(self, won) -> dict[str, list]:
        """For each run whose claim was just won: the runs of its job running
        on other nodes now, a moment before its fire time (its overlap policy
        is decided at its gate against these; a member reads them there from
        its replica, which lags the leader by about as much)."""
        out = {}
        for rid in won:
            run = Q.get_run(self.conn, rid) if isinstance(rid, int) else None
            if run is not None and run.node:
                out[str(rid)] = [list(x) for x in Q.running_elsewhere(self.conn, run, run.node)]
        return out

    def checked(self, node: str, text: Any, capacity: int = MAX_CLAIMS) -> C.Command:
        """The command worker ``node`` asked for, as the leader commits it;
        PermissionDenied for anything but a report on its own runs, and
        RequestError for one larger than a worker's reports are."""
        if not isinstance(text, str):
            raise RequestError("propose: cmd must be an encoded command")
        if len(text) > MAX_COMMAND:
            raise RequestError(f"propose: a command of {len(text)} bytes; a worker's claims "
                               f"and reports are under {MAX_COMMAND}")
        cmd = C.decode(text)
        _check_sizes(cmd, min(capacity, MAX_CLAIMS))
        if isinstance(cmd, C.CancelRun):
            self._may_replace(node, cmd)
            return self.stamp(cmd)
        if cmd.op not in WORKER_OPS:
            raise PermissionDenied(f"{cmd.op}: a worker proposes only claims and reports on "
                                   f"its own runs; worker {node} may not propose it")
        cmd = check_forwarded(cmd, node)   # its own name in the command
        if isinstance(cmd, (C.RunStarted, C.RunFinished)):
            now = Q.run_assignments(self.conn, [cmd.run_id]).get(cmd.run_id)
            if now is not None and now[1] != node and now[2] == cmd.token:
                raise PermissionDenied(f"run {cmd.run_id} is node {now[1]}'s, not worker "
                                       f"{node}'s: a worker reports only on its own runs")
        return self.stamp(cmd)

    def _may_replace(self, node: str, cmd: C.CancelRun) -> None:
        """A worker cancels another node's run only as its own run's overlap
        policy says (concurrency: replace, decided at its gate): a run of a
        ``replace`` job of which it holds a run itself."""
        target = Q.get_run(self.conn, cmd.run_id) if isinstance(cmd.run_id, int) else None
        spec = Q.job_spec(self.conn, target.job) if target is not None else None
        holds = target is not None and any(True for _ in self.conn.execute(
            "SELECT 1 FROM runs WHERE node=? AND job=? AND state IN ('assigned','running') "
            "LIMIT 1", (node, target.job)))
        newer = target is not None and any(True for _ in self.conn.execute(
            "SELECT 1 FROM runs WHERE node=? AND job=? AND state IN ('assigned','running') "
            "AND fire_time >= ? LIMIT 1", (node, target.job, target.fire_time)))
        if target is None or spec is None or spec.concurrency != "replace" or not holds:
            raise PermissionDenied(f"cancel_run of run {cmd.run_id}: a worker cancels a run "
                                   "only to replace it with its own run of the same job "
                                   f"(concurrency: replace); worker {node} may not")
        if not newer:
            # Its replacing run ended, or was lost, meanwhile: nothing to replace
            # (Refused: the worker's reporter stops asking).
            raise Refused(f"cancel_run of run {cmd.run_id}: worker {node} holds no newer run "
                          f"of {target.job} to replace it with now")

    # -- what the log says, to the workers ------------------------------------------------
    def on_effects(self, effects: list[Effect]) -> None:
        if not self.sessions:
            return
        for eff in effects:
            run = getattr(eff, "run", None)
            if not isinstance(run, Run) or not run.node:
                continue
            session = self.sessions.get(run.node)
            if session is None:
                continue
            try:
                if isinstance(eff, RunAssigned):
                    session.chan.send({"op": "assigned", **self.assignment(run)})
                elif isinstance(eff, (CancelRequested, RunStuck, RunDone, RunMoved)):
                    session.chan.send({"op": "effect", "kind": eff.kind,
                                       "run": list(run.row())})
            except Exception:  # one worker's trouble must not cost the others
                log.exception("event=worker_send_failed node=%s", session.node)

    # -- what the cluster asks ----------------------------------------------------------
    def registered(self) -> list[dict]:
        """The registered workers, read at most once a second: placement and
        node loss ask several times a second, on the critical loop, and a
        thousand rows take milliseconds (a registration waits that long to
        be placed on; a removed worker is disconnected at once anyway)."""
        now = self.clock.monotonic()
        if self._registered is None or now - self._registered[0] >= REGISTERED_TTL:
            self._registered = (now, Q.workers(self.conn))
        return self._registered[1]

    def answered_at(self) -> dict[str, float]:
        """Each worker's last frame (monotonic), this term."""
        return dict(self.contact)

    def views(self) -> list[NodeView]:
        """The registered workers as placement sees them."""
        now = self.clock.monotonic()
        out = []
        for w in self.registered():
            s = self.sessions.get(w["node"])
            why = ""
            if s is None:
                why = "not connected to the leader"
            elif now - s.last > RESPONSIVE:
                why = f"no word for {now - s.last:.1f}s"
            elif s.offset is None:
                why = "has not measured its clock yet"
            elif abs(s.offset) > self.max_clock_offset:
                why = (f"its clock is {s.offset * 1000:+.0f}ms off the leader's (over "
                       f"max_clock_offset)")
            out.append(NodeView(w["node"], not why, "up" if s is not None else "down",
                                frozenset(w["tags"]), why, worker=True))
        return out

    def responsive(self) -> set[str]:
        now = self.clock.monotonic()
        return {n for n, s in self.sessions.items() if now - s.last <= RESPONSIVE}

    def status(self) -> list[dict]:
        """Every registered worker, with what the leader knows of it now."""
        now = self.clock.monotonic()
        out = []
        for w in self.registered():
            s = self.sessions.get(w["node"])
            out.append({**w, "connected": s is not None,
                        "last_contact_s": None if s is None else round(now - s.last, 3),
                        "running": None if s is None else s.running,
                        "clock_offset_ms": None if s is None or s.offset is None
                        else round(s.offset * 1000, 1)})
        return out

    async def read_log(self, node: str, run: Run, offset: int) -> dict:
        """A chunk of ``run``'s log, read by worker ``node`` over its connection."""
        s = self.sessions.get(node)
        if s is None:
            raise StateError(f"worker {node} is not connected: its log is on it; it answers "
                             "when it is back")
        answer = await s.chan.request("read_log", {"run": list(run.row()),
                                                   "offset": offset}, LOG_WAIT)
        if not isinstance(answer, dict):
            raise StateError(f"worker {node} answered a log read with {type(answer).__name__}")
        return answer
