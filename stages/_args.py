"""The command line of a stage: [--params FILE] (stages/_grid.py: the per-row and per-cell stages')."""


def stage_args(doc: str, argv: list[str]):
    """The command line of a stage: [--params FILE]; returns params."""
    import argparse

    from vocabridge.config import load_params

    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--params", default="params.yaml")
    return load_params(parser.parse_args(argv).params)
