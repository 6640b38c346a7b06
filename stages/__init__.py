"""Thin entry points, one per DVC stage: read params, call the library, write outputs atomically."""

import sys

if sys.orig_argv[1:2] == ["-m"] and sys.orig_argv[2:3] and sys.orig_argv[2].startswith("stages."):
    from vocabridge.allocator import reexec

    reexec()  # before the stage imports torch: a stage runs on TCMalloc where it is installed
