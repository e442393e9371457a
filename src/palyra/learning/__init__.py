"""Learning from finished runs: reflection as a background task, candidates under review.

:mod:`~palyra.learning.model` is pure (thresholds, procedures, the prompt, parsing);
:mod:`~palyra.learning.reflection` queues and runs reflections and reviews candidates.
"""

from palyra.learning.config import LearningConfig
from palyra.learning.model import Candidate, State
from palyra.learning.reflection import TASK_KIND, Learning

__all__ = ["TASK_KIND", "Candidate", "Learning", "LearningConfig", "State"]
