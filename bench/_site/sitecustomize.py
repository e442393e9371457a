"""Loaded by the interpreter of a daemon the bench starts (``bench/_site`` is put first on its PYTHONPATH).

When ``PALYRA_BENCH_PROBE`` names a socket path, the daemon counts betterproto2
messages from start-up (not when ``BENCH_PROBE_MESSAGES`` is ``0``) and answers
:func:`bench.probe.snapshot` on that socket.
When ``BENCH_DAEMON_YAPPI`` names a file, the daemon also runs yappi on the CPU
clock (every thread) and writes its pstats there when it exits: a profile of
the daemon's side of a transport run (warm-up included). ``BENCH_DAEMON_CPROFILE``
does the same with the standard library's cProfile, for the main thread only.
When ``BENCH_HTTP_TRACE`` names a file prefix, the daemon stamps each HTTP request's
way to its SSE frames (``bench/http_trace.py``).
Any other process with this directory on its path is left untouched.
"""

import os

if os.environ.get("PALYRA_BENCH_PROBE"):
    from bench import probe

    probe.serve(os.environ["PALYRA_BENCH_PROBE"],
                messages=os.environ.get("BENCH_PROBE_MESSAGES", "1") != "0")
    if os.environ.get("BENCH_DAEMON_YAPPI"):
        probe.profile_until_exit(os.environ["BENCH_DAEMON_YAPPI"])
    elif os.environ.get("BENCH_DAEMON_CPROFILE"):
        probe.cprofile_until_exit(os.environ["BENCH_DAEMON_CPROFILE"])
    if os.environ.get("BENCH_HTTP_TRACE"):
        from bench import http_trace

        http_trace.install_in_daemon()
