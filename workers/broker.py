"""The `make run` broker: kombu's file-system transport, made safe for several processes (docs/decisions/0015).

kombu's own transport writes a message in place under the name a consumer looks for, so a worker polling the
folder can take a half-written file and die with `Unrecoverable error: JSONDecodeError` (issue 12). Here:

- a message is written to a temporary name in `tmp/` on the same file system, flushed to disk, then renamed
  into place with os.replace: a consumer sees the whole message or none of it;
- a consumer claims a message by renaming it into `processed/<its pid>-<its start time>/` (same file system:
  exactly one consumer wins the rename), instead of `shutil.move` into the system temp folder, which copies across
  file systems; the file stays there until the message is acknowledged, so the messages of a consumer killed
  outright (kill -9) are put back in the queue by the next consumer (kombu's own keeps them only in memory);
- a file that still cannot be decoded (one left by the old transport, a disk that filled up) is moved to `bad/`
  and logged, never raised: one bad file must not stop the worker, and it is kept for whoever looks;
- an exchange's table of bound queues is rewritten whole (temp name + os.replace) under one lock file, so a
  publisher never reads a table that another process is creating or truncating.

The URL stays `filesystem://`; settings name this transport with CELERY_BROKER_TRANSPORT.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from queue import Empty
from time import monotonic, monotonic_ns

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import dumps, loads
from kombu.utils.objects import cached_property

logger = logging.getLogger(__name__)
ORPHAN_CHECK_SECONDS = 5.0


def process_token(pid: int) -> str:
    """`pid-starttime`: names one process, not whichever later process is given the same pid."""
    return f"{pid}-{_start_time(pid)}"


def _start_time(pid: int) -> str:
    """Field 22 of /proc/PID/stat ("" for a zombie, which consumes nothing any more; "0" off Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()  # after the command's name
    except FileNotFoundError:
        return "" if Path("/proc/self/stat").exists() else "0"
    except OSError:
        return "0"
    return "" if fields[0] == "Z" else fields[19]


def process_alive(token: str) -> bool:
    pid, _, started = token.partition("-")
    if not pid.isdigit():
        return True  # not a consumer's folder: leave it alone
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _start_time(int(pid)) == started


def write_atomically(path: Path | str, data: bytes, tmp_dir: Path | str) -> None:
    """Write `data` to `path` so that readers see either the old file (or none) or all of the new one."""
    tmp = os.path.join(tmp_dir, f"{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class Channel(filesystem.Channel):
    """The file-system channel with whole-file writes and rename-to-claim reads."""

    @cached_property
    def tmp_folder(self) -> Path:
        folder = Path(self.data_folder_out) / "tmp"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    @cached_property
    def processed_root(self) -> Path:
        # In the broker folder, on the file system the messages are on: a rename there is atomic.
        folder = Path(self.transport_options.get("processed_folder") or Path(self.data_folder_in) / "processed")
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    @cached_property
    def claim_folder(self) -> Path:
        """Where this consumer keeps the messages it has taken and not yet acknowledged."""
        folder = self.processed_root / process_token(os.getpid())
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    @cached_property
    def _claims(self) -> dict[str, Path]:
        return {}  # delivery tag -> the claimed file

    @cached_property
    def _noack_queues(self) -> set[str]:
        return set()

    @cached_property
    def bad_folder(self) -> Path:
        folder = Path(self.data_folder_in) / "bad"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    # Messages -----------------------------------------------------------------------------------------------

    def _put(self, queue, payload, **kwargs):
        # The name sorts by time (the transport's FIFO order): in nanoseconds, as two messages published in the same
        # millisecond came out in the uuid's random order; the uuid keeps names unique across processes.
        name = f"{monotonic_ns():020d}_{uuid.uuid4()}.{queue}.msg"
        try:
            write_atomically(os.path.join(self.data_folder_out, name), dumps(payload).encode(), self.tmp_folder)
        except OSError as exc:
            raise ChannelError(f"Cannot add message {name!r} to {self.data_folder_out}: {exc}") from exc

    def _messages(self, queue: str) -> list[str]:
        wanted = f"{queue}.msg"
        return sorted(n for n in os.listdir(self.data_folder_in) if n.partition(".")[2] == wanted)

    def _get(self, queue):
        self._return_orphans()
        for name in self._messages(queue):
            claimed = self.claim_folder / name
            try:
                os.rename(os.path.join(self.data_folder_in, name), claimed)
            except FileNotFoundError:
                continue  # another consumer claimed it first
            try:
                message = loads(bytes_to_str(claimed.read_bytes()))
                tag = message["properties"]["delivery_tag"]
            except (OSError, ValueError, UnicodeDecodeError, KeyError, TypeError) as exc:
                self._set_aside(claimed, exc)
                continue
            self._claims[tag] = claimed
            if queue in self._noack_queues:
                self._release(tag)  # nobody will acknowledge it
            return message
        raise Empty()

    def _release(self, delivery_tag: str) -> None:
        """The message is done with (acknowledged, rejected, or back in the queue): its claimed file goes."""
        claimed = self._claims.pop(delivery_tag, None)
        if claimed is None:
            return
        if self.store_processed:
            os.replace(claimed, self.processed_root / claimed.name)
        else:
            claimed.unlink(missing_ok=True)

    _orphans_checked = 0.0

    def _return_orphans(self) -> None:
        """Put back in the queue what consumers that died (kill -9) had taken and not acknowledged."""
        if monotonic() - self._orphans_checked < ORPHAN_CHECK_SECONDS:
            return
        self._orphans_checked = monotonic()
        own = self.claim_folder.name
        for folder in self.processed_root.iterdir():
            if not folder.is_dir() or folder.name == own or process_alive(folder.name):
                continue
            returned = 0
            for claimed in sorted(folder.iterdir()):
                try:
                    os.rename(claimed, os.path.join(self.data_folder_in, claimed.name))
                    returned += 1
                except FileNotFoundError:
                    pass  # another consumer returned it
            try:
                folder.rmdir()
            except OSError:
                pass
            if returned:
                logger.warning("Broker: %d message(s) taken by consumer %s, which died, are back in the queue",
                               returned, folder.name)

    def basic_consume(self, queue, no_ack, callback, consumer_tag, **kwargs):
        if no_ack:
            self._noack_queues.add(queue)
        return super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)

    def basic_get(self, queue, no_ack=False, **kwargs):
        message = super().basic_get(queue, no_ack=no_ack, **kwargs)
        if message is not None and no_ack:
            self._release(message.delivery_tag)
        return message

    def basic_ack(self, delivery_tag, multiple=False):
        super().basic_ack(delivery_tag, multiple)
        self._release(delivery_tag)

    def basic_reject(self, delivery_tag, requeue=False):
        super().basic_reject(delivery_tag, requeue)  # with requeue, _restore has put a copy back first
        self._release(delivery_tag)

    def _restore(self, message):
        # A warm shutdown gives back what was taken and not started; the copy is in the queue, the claim goes.
        super()._restore(message)
        self._release(message.delivery_tag)

    def _set_aside(self, path: Path, exc: Exception) -> None:
        target = self.bad_folder / path.name
        try:
            os.replace(path, target)
        except OSError:
            target = path
        logger.error("Broker message %s cannot be read (%s): kept in %s, the worker goes on", path.name, exc, target)

    def _size(self, queue):
        return len(self._messages(queue))

    def _purge(self, queue):
        count = 0
        for name in self._messages(queue):
            try:
                os.remove(os.path.join(self.data_folder_in, name))
                count += 1
            except FileNotFoundError:
                pass
        return count

    # Exchange tables ----------------------------------------------------------------------------------------

    @contextmanager
    def _tables_locked(self) -> Iterator[None]:
        self.control_folder.mkdir(parents=True, exist_ok=True)
        with open(self.control_folder / ".lock", "a") as lock_file:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)

    def _read_table(self, file: Path) -> list:
        try:
            text = file.read_text()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise ChannelError(f"Cannot open {file}") from exc
        if not text.strip():
            return []
        try:
            return [filesystem.exchange_queue_t(*q) for q in json.loads(text)]
        except (ValueError, TypeError) as exc:
            # Only a table written by kombu's own transport can be torn; rebuilding it is the binders' job.
            logger.error("Broker exchange table %s cannot be read (%s): treated as empty", file, exc)
            return []

    def _write_table(self, file: Path, queues: list) -> None:
        write_atomically(file, dumps(queues).encode(), self.tmp_folder)

    def get_table(self, exchange):
        return self._read_table(self._exchange_file(exchange))

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        file = self._exchange_file(exchange)
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with self._tables_locked():
            queues = self._read_table(file)
            if binding not in queues:
                self._write_table(file, [binding, *queues])

    def _delete(self, queue, exchange, routing_key, pattern, *args, **kwargs):
        # The virtual channel forgets the queue; then the binding leaves the exchange's table.
        super(filesystem.Channel, self)._delete(queue, exchange, routing_key, pattern, *args, **kwargs)
        file = self._exchange_file(exchange)
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with self._tables_locked():
            queues = self._read_table(file)
            if binding in queues:
                self._write_table(file, [q for q in queues if q != binding])


class Transport(filesystem.Transport):
    Channel = Channel
