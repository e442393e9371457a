"""Chat channels: the router, durable pairing, exactly-once ingress, the outbox, adapters.

Pure decisions live in :mod:`~palyra.channels.routing` and
:mod:`~palyra.channels.replies`; everything durable goes through the journal
(``channels`` table) and the task queue (``channel.dispatch``, ``channel.send``).
"""

from palyra.channels.config import ChannelPolicy, ChannelsConfig
from palyra.channels.outbox import SEND_CONCURRENCY, SEND_TASK, Outbox
from palyra.channels.pairing import SUBJECT_PREFIX as PAIRING_SUBJECT
from palyra.channels.pairing import PairingBook
from palyra.channels.router import COMMAND_TASK, DISPATCH_TASK, Admission, ChannelRouter
from palyra.channels.routing import Envelope

__all__ = ["COMMAND_TASK", "DISPATCH_TASK", "PAIRING_SUBJECT", "SEND_CONCURRENCY", "SEND_TASK",
           "Admission", "ChannelPolicy", "ChannelRouter", "ChannelsConfig", "Envelope", "Outbox",
           "PairingBook"]
