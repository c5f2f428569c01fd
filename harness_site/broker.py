"""Celery's file-system transport, made safe for several processes on one machine.

Stock kombu creates the message file and then writes into it, so a worker polling at that
instant can read an empty file, die with "Unrecoverable error: JSONDecodeError" and lose the
message (kombu#1551; measured here: 8 to 360 of 3,000 messages mis-read under load). We write
under a name the reader ignores and rename atomically.
"""

import os
import uuid
from time import monotonic

from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        # Same name format as kombu's, so ordering and queue matching are unchanged.
        final = os.path.join(self.data_folder_out, f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg")
        with open(final + ".part", "wb") as f:
            f.write(str_to_bytes(dumps(payload)))
        os.replace(final + ".part", final)


class Transport(filesystem.Transport):
    Channel = Channel
