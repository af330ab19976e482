"""The code that runs inside the sandbox container (standard library only).

It is copied into the runner image by `areal sandbox build-image`; the image records a hash of these
files, and the sandbox refuses an image whose harness differs from the installed one.

- ``supervisor.py``: the container's PID 1. Reads one JSON job per line on stdin, runs it in fresh
  child processes with limits, judges it, cleans up, writes one JSON result line on stdout.
- ``runner.py``: the child: one fresh interpreter that executes the untrusted program (and, in
  function mode, its tests) and reports to the supervisor over a private pipe.
- ``prepare.py``: turns a function-mode job's tests into compiled, instrumented code (in the supervisor).
- ``compare.py``: whitespace- and float-tolerant comparison of program output (also used on the host).
"""
