"""One error type for everything a user can get wrong: the message is one line and names the culprit."""


class VocabridgeError(Exception):
    """Bad input or an unavailable resource; entry points print it as one line and exit non-zero."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class ConfigError(VocabridgeError):
    """A params.yaml key or value that vocabridge does not understand."""


class InputError(VocabridgeError):
    """A corpus file that cannot be read as promised (names the file and line)."""


class DownloadError(VocabridgeError):
    """A package registry that could not deliver what was asked for."""
