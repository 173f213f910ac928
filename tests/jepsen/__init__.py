"""A randomized checker for the money path: ``python -m tests.jepsen --trials N``.

Real parts only: a Temporal dev server, worker processes (``python -m tests.jepsen.worker``)
on one real SQLite tools' database. Each trial races refund runs on one invoice while
approvals race, the database is locked for random spans around the tool's timeout,
workers are SIGKILLed and restarted at random moments, and operators retry FAILED runs
and fork DONE ones. Then ``check`` reads every run's history, its state and the database.
"""
