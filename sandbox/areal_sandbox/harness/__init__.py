"""The code that runs inside the sandbox container (standard library only).

It is copied into the runner image by `areal sandbox build-image`; the image records a hash of these
files, and the sandbox refuses an image whose harness differs from the installed one.

- ``supervisor.py``: the container's PID 1. Reads one JSON job per line on stdin, runs it in fresh
  child processes with limits, judges it, cleans up, writes one JSON result line on stdout.
- ``runner.py``: the program's process: one fresh interpreter that executes the untrusted program;
  in function mode a server of calls that receives arguments and sends results as data.
- ``judge.py``: the tests' process (function mode), forked from the supervisor: runs the data set's
  tests with the program's functions replaced by proxies, computes every verdict, and reports them
  to the supervisor over a pipe the program never holds. It never executes the program's code.
- ``wire.py``: the data-only format of calls and replies, and the strict reader of the replies.
- ``prepare.py``: turns a function-mode job's tests into compiled, instrumented code (in the supervisor).
- ``compare.py``: whitespace- and float-tolerant comparison of program output (also used on the host).
"""
