"""The typed requests of `cronrd.ops.workflows`: each registered under its
operation, each parsing what its clients send."""

from __future__ import annotations

import dataclasses

import pytest

from cronrd.errors import UsageError
from cronrd.ops import typed
from cronrd.ops import workflows as W
from cronrd.ops.requests import REQUESTS


def test_every_type_is_registered_under_its_op():
    for cls in W.TYPES:
        assert REQUESTS[cls.OP] is cls
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
        assert cls.__doc__ and typed.schema(cls)["description"]
        assert all("description" in s for _, s, _ in typed.fields(cls))


def test_backfill_is_parsed_from_the_socket_keys():
    # ``from`` is a keyword in Python: the field is from_, the wire name from
    assert REQUESTS["backfill"] is W.Backfill
    req = typed.parse(W.Backfill, {"job": "etl", "from": 100, "to": 200, "parallel": None,
                                   "from_": "ignored", "newer": 1})
    assert req == W.Backfill(job="etl", from_=100, to=200)
    assert (req.reprocess, req.order, req.parallel, req.note) == ("missing", "oldest", 1, "")
    assert not (req.dry_run or req.force or req.downstream)
    assert typed.schema(W.Backfill)["required"] == ["job", "from", "to"]
    assert typed.as_args(req)["from"] == 100 and "from_" not in typed.as_args(req)


@pytest.mark.parametrize("args, message", [
    ({"job": "etl", "to": 2}, "missing argument 'from'"),
    ({"job": "etl", "from": "yesterday", "to": 2}, "argument 'from' must be an integer"),
    ({"job": "etl", "from": 1 << 63, "to": 2}, "argument 'from' is out of range"),
    ({"job": "etl", "from": 1}, "missing argument 'to'"),
    ({"from": 1, "to": 2}, "missing argument 'job'"),
    ({"job": "etl", "from": 1, "to": 2, "reprocess": "some"},
     "--reprocess is one of missing, failed, all, --order one of oldest, newest"),
    ({"job": "etl", "from": 1, "to": 2, "order": "random"}, "--order one of oldest, newest"),
    ({"job": "etl", "from": 1, "to": 2, "parallel": 0}, "--parallel must be from 1 to 1000"),
    ({"job": "etl", "from": 1, "to": 2, "parallel": 1001}, "--parallel must be from 1 to 1000"),
    ({"job": "etl", "from": 1, "to": 2, "note": "x" * 1001},
     "the note is longer than 1000 characters; say it shorter"),
    ({"job": "etl", "from": 1, "to": 2, "force": "yes"}, "argument 'force' has the wrong type"),
])
def test_a_bad_backfill_is_refused_with_the_handlers_old_message(args, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        typed.parse(W.Backfill, args)


def test_a_backfill_built_by_hand_checks_its_choices_too():
    with pytest.raises(UsageError, match="--reprocess is one of"):
        W.Backfill(job="etl", from_=1, to=2, order="sideways")
    with pytest.raises(UsageError, match="must be a JSON object"):
        typed.parse(W.Backfill, [1, 2])  # type: ignore[arg-type]


def test_the_lists_keep_their_defaults():
    assert typed.parse(W.ListBackfills, {}) == W.ListBackfills(id=None, limit=50, items=False)
    assert typed.parse(W.ListAlerts, {}).limit == 100
    assert typed.parse(W.ListDeadLetter, {}).limit == 100
    assert typed.parse(W.Audit, {"before": 7}) == W.Audit(limit=50, before=7)
    assert typed.parse(W.Notifications, {"job": "etl"}) == W.Notifications(job="etl", limit=50)
    assert typed.parse(W.Pools, {"consistent": True}).consistent


@pytest.mark.parametrize("cls, args, message", [
    (W.ListBackfills, {"limit": 0}, "limit must be between 1 and 100000"),
    (W.ListAlerts, {"limit": 100001}, "limit must be between 1 and 100000"),
    (W.ListAlerts, {"all": "yes"}, "argument 'all' has the wrong type"),
    (W.ListDeadLetter, {"limit": -1}, "limit must be between 1 and 100000"),
    (W.Audit, {"limit": 0}, "limit must be between 1 and 100000"),
    (W.Audit, {"before": "7"}, "argument 'before' must be an integer"),
    (W.Notifications, {"limit": 10001}, "limit must be between 1 and 10000"),
    (W.BackfillState, {"id": 1}, "missing argument 'state'"),
    (W.BackfillState, {"id": 1, "state": "done"}, "state is paused, running or cancelled"),
    (W.Rerun, {"job": "etl"}, "missing argument 'at'"),
    (W.Rerun, {"job": "etl", "at": 1.5}, "argument 'at' must be an integer"),
    (W.AckAlert, {"note": "disk"}, "missing argument 'id'"),
    (W.AckAlert, {"id": 3, "note": "x" * 1001}, "the note is longer than 1000 characters"),
    (W.DeadLetterAction, {"run_id": 3, "action": "retry"}, "action is requeue or discard"),
    (W.DeadLetterAction, {"run_id": 3, "action": "discard", "note": "x" * 1001},
     "the note is longer than 1000 characters"),
])
def test_out_of_bounds_arguments_are_refused(cls, args, message):
    with pytest.raises(UsageError, match=message):
        typed.parse(cls, args)


def test_the_writes_parse_what_the_cli_sends():
    assert typed.parse(W.BackfillState, {"id": 4, "state": "paused"}).state == "paused"
    assert typed.parse(W.Rerun, {"job": "etl", "at": 60, "downstream": True,
                                 "dry_run": False}) == W.Rerun("etl", 60, downstream=True)
    assert typed.parse(W.AckAlert, {"id": 4, "note": "disk replaced"}).note == "disk replaced"
    req = typed.parse(W.DeadLetterAction, {"run_id": 9, "action": "requeue", "note": None})
    assert (req.run_id, req.action, req.note) == (9, "requeue", "")
