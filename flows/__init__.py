"""Prefect flows that run the DAG of dvc.yaml, one task per DVC stage (the DAG itself lives only in dvc.yaml)."""

import os

# The flows start a temporary Prefect server on the user's machine; its usage telemetry needs the internet, and
# without it logs a traceback at start and an error every ten minutes. A user's own setting wins.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
