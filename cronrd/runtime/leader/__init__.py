"""What the leader does and no other node: the scheduler that turns
schedules into fire times, placing runs on nodes (placement), backfills,
SLA watches (sla_watch), heartbeat timeouts (heartbeat_watch), and the
duties that start and stop with leadership (leadership)."""
