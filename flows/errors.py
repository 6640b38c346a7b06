"""Errors the flows raise: one line that says what failed and why."""


class FlowError(Exception):
    """A problem with the flow's inputs or the workspace, reported as one line."""


class StageError(FlowError):
    """A DVC stage failed; the message carries the stage's own error line."""
