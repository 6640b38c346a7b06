"""Register the deployments of prefect.yaml with the Prefect server (`python -m flows.deploy`).

Same result as `prefect deploy --all` for these process-pool deployments. It exists because that command,
with prefect 3.8.8 and fastapi >= 0.151, fails right after creating the first deployment (its hint about
online workers sends `limit: null`, which the server then rejects); pin fastapi < 0.151 to use it directly.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml
from prefect.flows import load_flow_from_entrypoint

from flows.errors import FlowError


def deploy_all(project: Path = Path("."), only: list[str] | None = None) -> list[str]:
    """Apply every deployment of `project`/prefect.yaml; process workers run them in `project`."""
    spec = yaml.safe_load((project / "prefect.yaml").read_text(encoding="utf-8"))
    names = []
    for entry in spec.get("deployments") or []:
        if only and entry["name"] not in only:
            continue
        pool = (entry.get("work_pool") or {}).get("name")
        if not pool:
            raise FlowError(f"prefect.yaml: deployment {entry['name']!r} names no work pool")
        flow = load_flow_from_entrypoint(str(project / entry["entrypoint"]))
        deployment = flow.to_deployment(name=entry["name"], work_pool_name=pool,
                                        parameters=entry.get("parameters") or {},
                                        description=entry.get("description"), tags=entry.get("tags") or [])
        deployment.entrypoint = entry["entrypoint"]
        deployment.job_variables = {"working_dir": str(project.resolve())} | (entry.get("job_variables") or {})
        deployment.apply()
        names.append(f"{flow.name}/{entry['name']}")
    return names


def main(argv: list[str] | None = None) -> int:
    try:
        for name in deploy_all(Path("."), (argv if argv is not None else sys.argv[1:]) or None):
            print(f"deployed {name}")
    except FlowError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
