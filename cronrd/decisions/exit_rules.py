"""Which rule decides how a run that ended counts, and whether it is
retried: ``success_exit_codes`` and ``retries`` (``max``, ``retry_on``,
``not_on_exit_codes``). Pure: a function of the job's definition and the
run's end; apply records the verdict (state/apply_runs.py, from cluster
version 2 on) and ``cronrd explain`` shows the reason it wrote.

The order, first match decides:

1. ``success_exit_codes``: a run that exited (no signal) with a code the
   list holds succeeded; with one it does not hold, failed (an exit 0
   too, when the list leaves 0 out).
2. ``retries.retry_on``: a failure (non-zero exit, signal) is retried only
   if ``failure`` is listed, a timeout only if ``timeout`` is.
3. ``retries.not_on_exit_codes``: a failure with a listed code is not
   retried (the command said trying again cannot help: EX_USAGE, ...).
4. ``retries.max``: retried while attempts are left.

A ``lost`` run is not judged here (``on_node_loss`` decides it), nor a
cancelled one (nobody retries what an operator stopped)."""

from __future__ import annotations

from dataclasses import dataclass

from ..jobspec.exit_codes import codes_text
from ..jobspec.model import RETRY_ON, JobSpec


@dataclass(frozen=True)
class Verdict:
    state: str          # the state the run ends in
    retry: bool         # whether another attempt follows
    rule: str           # which rule decided, as the run's reason says it ("" for none)


def _has_rules(spec: JobSpec) -> bool:
    r = spec.retries
    return bool(spec.success_exit_codes or r.max or r.not_on_exit_codes
                or r.retry_on != RETRY_ON)


def judge(spec: JobSpec, state: str, exit_code: int | None, signal: int | None,
          attempts_used: int) -> Verdict:
    """``state``: what the node reported (succeeded, failed, timed_out);
    ``attempts_used``: the attempts of this try so far, this one included.
    A job with no rule of its own gets no rule text (nothing decided more
    than "a failure is a failure")."""
    state = _counted(spec, state, exit_code, signal)
    if state == "succeeded":
        rule = ""
        if spec.success_exit_codes and exit_code not in (0, None):
            rule = f"exit {exit_code} counts as success (success_exit_codes: " \
                   f"{codes_text(spec.success_exit_codes)})"
        return Verdict(state, False, rule)
    if state not in ("failed", "timed_out"):
        return Verdict(state, False, "")
    said = not _has_rules(spec)
    r = spec.retries
    if state == "failed" and exit_code is not None and signal is None \
            and spec.success_exit_codes and exit_code not in spec.success_codes:
        lead = f"exit {exit_code} is not in success_exit_codes " \
               f"({codes_text(spec.success_exit_codes)}); "
    else:
        lead = ""
    kind = "timeout" if state == "timed_out" else "failure"
    if kind not in r.retry_on:
        return Verdict(state, False, lead + f"not retried: retries.retry_on does not list {kind} "
                                            f"(it lists {', '.join(r.retry_on)})")
    if kind == "failure" and signal is None and exit_code in r.not_on_exit_codes:
        return Verdict(state, False, lead + f"not retried: exit {exit_code} is in "
                                            f"retries.not_on_exit_codes "
                                            f"({codes_text(r.not_on_exit_codes)})")
    allowed = 1 + r.max
    if attempts_used >= allowed:
        if said:
            return Verdict(state, False, "")
        return Verdict(state, False, lead + (f"not retried: retries.max {r.max} used"
                                             if r.max else "not retried: retries.max is 0"))
    return Verdict(state, True, lead + f"retried (retries.retry_on lists {kind}): "
                                       f"attempt {attempts_used + 1} of {allowed} follows")


def _counted(spec: JobSpec, state: str, exit_code: int | None, signal: int | None) -> str:
    """The state a reported end counts as, by ``success_exit_codes``."""
    if not spec.success_exit_codes or signal is not None or exit_code is None:
        return state
    if state == "succeeded" and exit_code not in spec.success_codes:
        return "failed"
    if state == "failed" and exit_code in spec.success_codes:
        return "succeeded"
    return state
