"""The ``pools:`` section of the daemon config: named pools of slots that
jobs share (a job names one with ``pool:``), each ``{slots: N, scope:
cluster|node}``."""

from __future__ import annotations

from cronrd.jobspec.model import NAME_RE

from .model import MAX_POOL_SLOTS, MAX_POOLS, POOL_KEYS, POOL_SCOPES, PoolConfig
from .problems import ConfigProblems

_EXAMPLE = "pools: {db: {slots: 2}}"


def parse_pools(raw: object, report: ConfigProblems) -> tuple[PoolConfig, ...]:
    """The pools, sorted by name (problems go to ``report``)."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        report.add(("pools",), f"pools must be a mapping of pool names to {{slots: N, scope: "
                               f"cluster|node}}, e.g. {_EXAMPLE} (got {type(raw).__name__})")
        return ()
    if len(raw) > MAX_POOLS:
        report.add(("pools",), f"pools defines {len(raw)} pools; at most {MAX_POOLS} are "
                               "allowed")
        return ()
    out = []
    for name, body in raw.items():
        key = ("pools", name)
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            report.add(key, f"pool name {name!r} is not valid: use letters, digits, '_', '.' "
                            "and '-', starting with a letter or digit", at_key=True)
            continue
        if not isinstance(body, dict):
            report.add(key, f"pools.{name} must be a mapping {{slots: N, scope: cluster|node}}"
                            f", e.g. {_EXAMPLE}")
            continue
        bad = False
        for k in body:
            if k not in POOL_KEYS:
                report.unknown(key, k, POOL_KEYS)
                bad = True
        slots = body.get("slots")
        if slots is None:
            report.add(key, f"pools.{name} needs slots: N (how many runs of its jobs may run "
                            "at once)")
            bad = True
        elif not isinstance(slots, int) or isinstance(slots, bool) or \
                not 1 <= slots <= MAX_POOL_SLOTS:
            report.add(key + ("slots",), f"pools.{name}.slots must be a whole number from 1 "
                                         f"to {MAX_POOL_SLOTS} (got {slots!r})")
            bad = True
        scope = body.get("scope", "cluster")
        if scope not in POOL_SCOPES:
            report.add(key + ("scope",), f"pools.{name}.scope must be cluster (slots shared "
                                         f"by the whole cluster) or node (slots on each node)"
                                         f" (got {scope!r})")
            bad = True
        if not bad:
            assert slots is not None  # a missing slots is bad
            out.append(PoolConfig(name=name, slots=slots, scope=scope))
    return tuple(sorted(out, key=lambda p: p.name))
