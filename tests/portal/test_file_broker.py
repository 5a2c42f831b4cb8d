"""`make run`'s broker: a folder that several processes publish to while a worker reads, with no torn message.

Real kombu connections on the transport `make run` uses (workers/broker.py), publishers in processes of their own.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

from kombu import Connection, Exchange, Queue

from workers.broker import Transport

PUBLISHERS, MESSAGES, PAYLOAD_BYTES = 3, 40, 512 * 1024  # large messages: a write takes long enough to be seen


def _options(folder: Path) -> dict:
    for sub in ("processed", "control"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    return {"data_folder_in": str(folder), "data_folder_out": str(folder), "processed_folder": str(folder / "processed"),
            "control_folder": str(folder / "control"), "store_processed": False, "polling_interval": 0.01}


def _connection(folder: Path, transport=Transport) -> Connection:
    return Connection("filesystem://", transport=transport, transport_options=_options(folder))


QUEUE = Queue("kakehashi", Exchange("kakehashi", type="direct"), routing_key="kakehashi")


def _queue(name: str) -> Queue:
    # One queue per test: kombu remembers declared bindings per process, while each test has a new folder.
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


def _publish(folder: str, who: int) -> None:
    with _connection(Path(folder)) as conn:
        producer = conn.Producer()
        for n in range(MESSAGES):
            producer.publish({"who": who, "n": n, "pad": "x" * PAYLOAD_BYTES}, exchange=QUEUE.exchange,
                             routing_key="kakehashi", declare=[QUEUE], serializer="json")


def test_a_worker_reading_while_three_processes_publish_gets_every_message_once_and_whole(tmp_path):
    with _connection(tmp_path) as conn:
        QUEUE(conn.default_channel).declare()
        ctx = multiprocessing.get_context("spawn")
        publishers = [ctx.Process(target=_publish, args=(str(tmp_path), who)) for who in range(PUBLISHERS)]
        for proc in publishers:
            proc.start()
        received = []
        with conn.SimpleQueue(QUEUE) as queue:
            while len(received) < PUBLISHERS * MESSAGES:
                message = queue.get(timeout=60)
                received.append((message.payload["who"], message.payload["n"]))
                assert len(message.payload["pad"]) == PAYLOAD_BYTES
                message.ack()
        for proc in publishers:
            proc.join(timeout=60)
            assert proc.exitcode == 0
    assert sorted(received) == [(w, n) for w in range(PUBLISHERS) for n in range(MESSAGES)]
    # Each publisher's messages arrive in the order it sent them.
    for who in range(PUBLISHERS):
        assert [n for w, n in received if w == who] == list(range(MESSAGES))
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".msg")]
    assert not os.listdir(tmp_path / "tmp")


def test_a_message_that_cannot_be_read_is_set_aside_and_the_next_one_is_delivered(tmp_path):
    queue_ = _queue("torn")
    with _connection(tmp_path) as conn:
        queue_(conn.default_channel).declare()
        # What kombu's own transport could leave behind: a message cut off mid-write.
        (tmp_path / "000000000000001_torn.torn.msg").write_text('{"body": "eyJh')
        with conn.Producer() as producer:
            producer.publish({"n": 1}, exchange=queue_.exchange, routing_key="torn", serializer="json")
        with conn.SimpleQueue(queue_) as queue:
            message = queue.get(timeout=10)
            assert message.payload == {"n": 1}
            message.ack()
    assert (tmp_path / "bad" / "000000000000001_torn.torn.msg").read_text() == '{"body": "eyJh'


def _take_one_and_hang(folder: str, taken) -> None:
    with _connection(Path(folder)) as conn, conn.SimpleQueue(_queue("killed")) as queue:
        message = queue.get(timeout=30)
        taken.put(message.payload["n"])
        time.sleep(600)  # killed here, the message neither acknowledged nor given back


def test_a_message_taken_by_a_worker_killed_outright_is_delivered_to_the_next_one(tmp_path):
    queue_ = _queue("killed")
    with _connection(tmp_path) as conn:
        queue_(conn.default_channel).declare()
        with conn.Producer() as producer:
            for n in (1, 2):
                producer.publish({"n": n}, exchange=queue_.exchange, routing_key="killed", serializer="json")
    ctx = multiprocessing.get_context("spawn")
    taken = ctx.Queue()
    doomed = ctx.Process(target=_take_one_and_hang, args=(str(tmp_path), taken))
    doomed.start()
    assert taken.get(timeout=60) == 1
    os.kill(doomed.pid, signal.SIGKILL)
    doomed.join(timeout=30)

    received = []
    with _connection(tmp_path) as conn, conn.SimpleQueue(queue_) as queue:
        for _ in range(2):
            message = queue.get(timeout=30)
            received.append(message.payload["n"])
            message.ack()
    assert sorted(received) == [1, 2]
    assert [p for p in (tmp_path / "processed").rglob("*") if p.is_file()] == []


def test_messages_published_one_after_another_are_delivered_in_that_order(tmp_path):
    # Dozens a millisecond: the order must not fall back to the names' random part (it did at millisecond names).
    queue_ = _queue("ordered")
    with _connection(tmp_path) as conn:
        queue_(conn.default_channel).declare()
        with conn.Producer() as producer:
            for n in range(200):
                producer.publish({"n": n}, exchange=queue_.exchange, routing_key="ordered", serializer="json")
        with conn.SimpleQueue(queue_) as queue:
            received = []
            for _ in range(200):
                message = queue.get(timeout=30)
                received.append(message.payload["n"])
                message.ack()
    assert received == list(range(200))
