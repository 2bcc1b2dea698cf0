"""Explaining a fire time (`cronrd explain`): a subject, the steps that
look at it (schedule, capacity, record, workflow) and a verdict.
It reads the state only, so the daemon and the offline CLI share it."""
