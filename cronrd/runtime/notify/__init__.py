"""Sending events out: the notifiers (senders: webhooks, email, commands)
and the leader's delivery duty with its retries (delivery)."""
