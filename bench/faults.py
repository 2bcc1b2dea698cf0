#!/usr/bin/env python3
"""Fault-injection suite, long mode: many seeds against real daemons in
network namespaces (root; iproute2, iptables; faketime and gcc for the
clock and fsync faults). See tests/support/faults/ and README.md.

    python bench/faults.py --seeds 20 --duration 120
    python bench/faults.py --seed 1234          # replay one seed
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT))

from faults.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
