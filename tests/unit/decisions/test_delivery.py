"""Who gets an event and when it is tried again: routes by kind, the job's
own notify or the cluster default, back-off doubling up to its cap, a
notifier the config lacks given up at once, settled events done."""

from __future__ import annotations

from cronrd.decisions import delivery as D
from cronrd.jobspec.notify import NotifyRoute

P = {"chat": D.Policy(max_attempts=3, retry_delay=10.0, max_retry_delay=15.0),
     "mail": D.Policy()}


def test_recipients_by_kind_and_the_default_only_without_a_job_notify():
    default = (NotifyRoute("mail"),)
    job = (NotifyRoute("chat", ("failed", "sla_miss")), NotifyRoute("mail", ("recovered",)))
    assert D.recipients("failed", None, default) == ["mail"]
    assert D.recipients("retrying", None, default) == []       # not in DEFAULT_ON
    assert D.recipients("failed", job, default) == ["chat"]
    assert D.recipients("sla_finish_by", job, default) == ["chat"]
    assert D.recipients("failed", (), default) == []           # notify: [] is nobody


def test_first_attempt_at_once_then_doubling_back_off_up_to_the_cap():
    plan = D.plan(100.0, [(1, ["chat"])], {}, P, set())
    assert plan.sends == [D.Send(1, "chat", 1, False)] and plan.done == []
    one = {1: [D.Attempt("chat", 1, 100.0, False, False)]}
    assert D.plan(105.0, [(1, ["chat"])], one, P, set()).next_at == 110.0
    assert D.plan(110.0, [(1, ["chat"])], one, P, set()).sends == [D.Send(1, "chat", 2, False)]
    two = {1: one[1] + [D.Attempt("chat", 2, 110.0, False, False)]}
    # 10 * 2 = 20 > the cap 15; the third attempt is the last
    assert D.plan(120.0, [(1, ["chat"])], two, P, set()).next_at == 125.0
    assert D.plan(125.0, [(1, ["chat"])], two, P, set()).sends == [D.Send(1, "chat", 3, True)]


def test_settled_when_sent_or_final_and_in_flight_is_not_sent_twice():
    sent = {1: [D.Attempt("chat", 1, 1.0, True, True)],
            2: [D.Attempt("chat", 3, 1.0, False, True)]}
    plan = D.plan(5.0, [(1, ["chat"]), (2, ["chat"]), (3, []), (4, ["chat"])], sent, P,
                  {(4, "chat")})
    assert plan.done == [1, 2, 3] and plan.sends == [] and plan.give_up == []


def test_a_notifier_the_config_does_not_define_is_given_up_at_once():
    plan = D.plan(5.0, [(7, ["pager", "mail"])], {}, P, set())
    assert plan.give_up == [D.GiveUp(7, "pager", 1, "unknown")]
    assert plan.sends == [D.Send(7, "mail", 1, False)]
