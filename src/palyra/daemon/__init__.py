"""The daemon: the composition root and the files it keeps in the data dir.

``daemon.run_daemon`` serves (``palyra serve``); ``wiring`` builds the
application graph from the config; ``logs`` sets up structured logging;
``listen`` binds the sockets. The data dir's files (``datadir``, ``tokens``,
``discovery``: ``daemon.json``) are also read by the CLI.

Nothing is re-exported here on purpose: the CLI's client commands import the
small data-dir modules, and an eager import of ``daemon`` would pull in every
server dependency (uvicorn, Litestar, grpclib) on each ``palyra`` call.
"""
