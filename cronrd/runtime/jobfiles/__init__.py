"""Job files into state: the watcher reads the job directory, parses the
files in worker processes and proposes SyncJobs for what changed."""
