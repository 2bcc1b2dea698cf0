"""A Jepsen-style fault-injection suite for real cronrd daemons (issue 11).

Each node runs in its own network namespace on a bridge (net.py); a seeded
schedule (schedule.py) of faults (actions.py: iptables partitions and
one-way loss, tc tbf/netem, kill -9, SIGSTOP, faketime clock skews and
jumps, a full data_dir, slow fsync) hits them; then everything is healed,
the cluster converges and checker.py judges every (job, fire time) from the
run records and from the lines the jobs wrote themselves. runner.py runs
one seed end to end; cli.py (bench/faults.py) many; the CI mode is
tests/integration/test_fault_suite.py. The daemons are driven only from the
outside: their config, job files, control socket and signals.
"""
