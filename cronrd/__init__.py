"""cronrd: a fault-tolerant cron replacement."""

__version__ = "0.1.0"
