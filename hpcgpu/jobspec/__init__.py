"""What a job is and how it is written: shape, units, walltime, dialects, launchers, render, queues."""
