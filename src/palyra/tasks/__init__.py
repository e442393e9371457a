"""Background work: a durable task queue with leases, and the workers that run it.

* :mod:`palyra.tasks.model` — the record and every change as a pure function
  (lifecycle from ``spec/lifecycle/background_task.yaml``, fencing epochs);
* :mod:`palyra.tasks.queue` — the journaled queue: one commit per change,
  event-driven wake-ups, deadline timer, recovery;
* :mod:`palyra.tasks.worker` — claim, run, heartbeat, hear a cancel.
"""

from palyra.tasks.model import Debounce, State, TaskRecord
from palyra.tasks.queue import FollowUp, TaskQueue
from palyra.tasks.worker import Done, Handler, TaskContext, TaskWorker

__all__ = ["Debounce", "Done", "FollowUp", "Handler", "State", "TaskContext", "TaskQueue",
           "TaskRecord", "TaskWorker"]
