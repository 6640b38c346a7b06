"""Prefect flows that run the DAG of dvc.yaml, one task per DVC stage (the DAG itself lives only in dvc.yaml)."""
