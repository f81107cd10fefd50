"""The embedded default's broker: kombu's file-system transport, safe against half-written files.

kombu 5.7's transport creates a message's file under its final ``*.msg`` name and then writes it;
a worker polling the folder can claim and read it in between, and dies on ``JSONDecodeError``
(issue 28: the worker crashed once and was restarted ~25 s later). The exchange tables are
rewritten in place the same way (``open("wb")`` truncates before the lock is taken). Here:

- a message is written under a ``.part`` name that no reader matches, then renamed to its
  ``.msg`` name: a rename is atomic, so a reader sees the whole file or none;
- a reader claims a message by renaming it into the processed folder (same file system, so
  one rename, and one reader wins), never by copying it to /tmp;
- an exchange table is replaced by a rename too, under a lock file, so readers and binders
  never see it empty or half-written;
- a message that still cannot be decoded (a disk filled up mid-write, a power loss) is moved
  aside to ``unreadable/`` and logged, instead of crashing the worker.

Settings select it with ``CELERY_BROKER_TRANSPORT`` when ``CELERY_BROKER_URL`` is ``filesystem://``.
(Not kombu's SQLAlchemy transport: it polls a database table with row locks, a second SQLite file
or tables in the portal's own busy one, for a broker the embedded default only needs on one machine.)
"""

import contextlib
import fcntl
import logging
import os
import uuid
from pathlib import Path
from queue import Empty
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.transport.filesystem import exchange_queue_t
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

logger = logging.getLogger(__name__)


def _write_then_rename(final: str | Path, data: bytes) -> None:
    """``final`` appears whole or not at all: written under a name no reader matches, then renamed."""
    partial = f"{final}.{uuid.uuid4().hex}.part"
    try:
        with open(partial, "wb") as f:
            f.write(data)
        os.replace(partial, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(partial)
        raise


@contextlib.contextmanager
def _exclusive(path: Path):
    """An exclusive lock on ``path``'s own lock file (the table itself is replaced, so it cannot hold one)."""
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        try:
            _write_then_rename(os.path.join(self.data_folder_out, name), str_to_bytes(dumps(payload)))
        except OSError as exc:
            raise ChannelError(f"Cannot add a message to {self.data_folder_out!r}") from exc

    def _get(self, queue):
        wanted = f"{queue}.msg"
        claimed_folder = self.processed_folder
        for filename in sorted(os.listdir(self.data_folder_in)):
            if filename.partition(".")[2] != wanted:
                continue  # another queue's message, or a message still being written (.part)
            claimed = os.path.join(claimed_folder, filename)
            try:
                os.rename(os.path.join(self.data_folder_in, filename), claimed)  # one reader wins
            except FileNotFoundError:
                continue  # another reader took it
            except OSError as exc:
                raise ChannelError(f"Cannot claim {filename!r} from {self.data_folder_in!r}") from exc
            try:
                with open(claimed, "rb") as f:
                    payload = f.read()
                message = loads(bytes_to_str(payload))
            except (OSError, ValueError) as exc:
                self._set_aside(claimed, filename, exc)
                continue
            if not self.store_processed:
                os.remove(claimed)
            return message
        raise Empty()

    def _set_aside(self, claimed: str, filename: str, exc: Exception) -> None:
        aside = Path(self.processed_folder).parent / "unreadable"
        aside.mkdir(exist_ok=True)
        with contextlib.suppress(OSError):
            os.replace(claimed, aside / filename)
        logger.error("Broker message %s could not be read (%s); moved to %s", filename, exc, aside)

    def get_table(self, exchange):
        file = self._exchange_file(exchange)
        try:
            return [exchange_queue_t(*q) for q in loads(file.read_text())]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ChannelError(f"Cannot open {file}") from exc

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        file = self._exchange_file(exchange)
        self.control_folder.mkdir(exist_ok=True)
        bound = exchange_queue_t(routing_key or "", pattern or "", queue or "")
        try:
            with _exclusive(file):
                queues = self.get_table(exchange)
                if bound not in queues:
                    _write_then_rename(file, str_to_bytes(dumps([bound, *queues])))
        except OSError as exc:
            raise ChannelError(f"Cannot open {file}") from exc

    def _delete(self, queue, exchange, routing_key, pattern, *args, **kwargs):
        super(filesystem.Channel, self)._delete(queue, exchange, routing_key, pattern, *args, **kwargs)
        file = self._exchange_file(exchange)
        bound = exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with _exclusive(file):
            queues = self.get_table(exchange)
            if bound in queues:
                queues.remove(bound)
                _write_then_rename(file, str_to_bytes(dumps(queues)))


class Transport(filesystem.Transport):
    Channel = Channel


__all__ = ["Channel", "Transport"]
