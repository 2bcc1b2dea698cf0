"""cronrd: a fault-tolerant cron replacement."""

__version__ = "0.3.0"
