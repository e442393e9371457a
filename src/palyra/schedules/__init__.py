"""Scheduled prompts: cron (in a time zone) or one-off prompts fired onto the task queue.

:mod:`~palyra.schedules.model` is pure (the record, next firing, what is due);
:mod:`~palyra.schedules.service` keeps schedules in the journal and fires them.
"""

from palyra.schedules.model import ScheduleRecord, due, next_after, validate
from palyra.schedules.service import PROMPT_TASK, Schedules

__all__ = ["PROMPT_TASK", "ScheduleRecord", "Schedules", "due", "next_after", "validate"]
