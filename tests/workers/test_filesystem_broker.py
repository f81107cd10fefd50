"""Issue 28 item 15: the embedded default's broker under concurrent writers and readers.

kombu's file-system transport made a message's file visible before writing it, so a polling
worker could read it half-written and die on JSONDecodeError. Three writer processes and three
reader processes share one broker folder here: every message arrives exactly once and whole.
"""

import hashlib
import multiprocessing
import os
import time
from queue import Empty

from django.conf import settings
from kombu import Connection

TRANSPORT = "workers.filesystem_broker:Transport"
WRITERS, READERS, EACH = 3, 3, 150
BODY = 48 * 1024  # large enough that writing one message takes a while


def _options(folder: str) -> dict:
    return {
        "data_folder_in": os.path.join(folder, "queue"),
        "data_folder_out": os.path.join(folder, "queue"),
        "processed_folder": os.path.join(folder, "processed"),
        "control_folder": os.path.join(folder, "control"),
        "polling_interval": 0.01,
        "store_processed": False,
    }


def _write(folder: str, transport: str, writer: int, errors) -> None:
    try:
        with Connection("filesystem://localhost/", transport=transport, transport_options=_options(folder)) as conn:
            queue = conn.SimpleQueue("jobs")
            for n in range(EACH):
                body = os.urandom(BODY).hex()
                queue.put({"id": f"{writer}-{n}", "body": body, "sha": hashlib.sha256(body.encode()).hexdigest()})
    except Exception as exc:  # reported to the test, which fails on it
        errors.put(f"writer {writer}: {exc!r}")


def _read(folder: str, transport: str, received, errors, deadline: float) -> None:
    try:
        with Connection("filesystem://localhost/", transport=transport, transport_options=_options(folder)) as conn:
            queue = conn.SimpleQueue("jobs")
            while time.monotonic() < deadline:
                try:
                    message = queue.get(timeout=0.2)
                except Empty:
                    continue
                payload = message.payload
                message.ack()
                if payload == "stop":
                    return
                whole = hashlib.sha256(payload["body"].encode()).hexdigest() == payload["sha"]
                received.put((payload["id"], whole))
    except Exception as exc:
        errors.put(f"reader: {exc!r}")


def _exchange(folder: str, transport: str) -> tuple[list, list, list]:
    for sub in ("queue", "processed", "control"):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    context = multiprocessing.get_context("spawn")
    received, errors = context.Queue(), context.Queue()
    deadline = time.monotonic() + 120  # bounded, whatever happens
    readers = [
        context.Process(target=_read, args=(folder, transport, received, errors, deadline)) for _ in range(READERS)
    ]
    writers = [context.Process(target=_write, args=(folder, transport, w, errors)) for w in range(WRITERS)]
    for p in readers + writers:  # readers first: they poll the folder while the writers write
        p.start()
    for p in writers:
        p.join(120)
    with Connection("filesystem://localhost/", transport=transport, transport_options=_options(folder)) as conn:
        queue = conn.SimpleQueue("jobs")
        for _ in readers:
            queue.put("stop")
    ids = []
    while len(ids) < WRITERS * EACH and time.monotonic() < deadline:
        try:
            ids.append(received.get(timeout=1))
        except Empty:
            if not any(p.is_alive() for p in readers):
                break
    for p in readers:
        p.join(max(1.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
    found_errors = []
    while not errors.empty():
        found_errors.append(errors.get())
    return ids, found_errors, sorted(os.listdir(os.path.join(folder, "queue")))


def test_the_settings_use_the_safe_transport_on_the_embedded_default():
    if settings.CELERY_BROKER_URL.startswith("filesystem"):
        assert settings.CELERY_BROKER_TRANSPORT == TRANSPORT


def test_concurrent_writers_and_readers_see_every_message_once_and_whole(tmp_path):
    # when: three processes write 150 messages of 96 KB each while three others read
    ids, errors, left = _exchange(str(tmp_path), TRANSPORT)

    # then: no reader failed, every message arrived once, whole, and nothing is left behind
    assert errors == []
    assert sorted(i for i, _ in ids) == sorted(f"{w}-{n}" for w in range(WRITERS) for n in range(EACH))
    assert all(whole for _, whole in ids)
    assert left == []
    assert not (tmp_path / "unreadable").exists()


def test_an_unreadable_message_is_set_aside_and_the_next_one_delivered(tmp_path):
    """A file cut short by a full disk or a power loss is moved aside and logged, not a crash."""
    options = _options(str(tmp_path))
    for sub in ("queue", "processed", "control"):
        os.makedirs(tmp_path / sub)
    with Connection("filesystem://localhost/", transport=TRANSPORT, transport_options=options) as conn:
        # A queue name of its own: kombu keeps declared exchanges per process, whatever the folder.
        queue = conn.SimpleQueue("mended")
        (tmp_path / "queue" / "0_cut.mended.msg").write_text('{"body": "cut sh')
        queue.put({"id": "whole"})

        message = queue.get(timeout=2)

        assert message.payload == {"id": "whole"}
        assert os.listdir(tmp_path / "unreadable") == ["0_cut.mended.msg"]


BINDERS, EXCHANGES = 6, 40


def _bind(folder: str, transport: str, binder: int, barrier, errors) -> None:
    """Binds its queue to each exchange at the same moment as the others, then reads the table back."""
    try:
        with Connection("filesystem://localhost/", transport=transport, transport_options=_options(folder)) as conn:
            channel = conn.default_channel
            for e in range(EXCHANGES):
                barrier.wait(10)
                channel._queue_bind(f"fan-{e}", "", "", f"q{binder}")
                if f"q{binder}" not in {q.queue for q in channel.get_table(f"fan-{e}")}:
                    errors.put(f"binder {binder}: its binding to fan-{e} was lost")
    except Exception as exc:  # reported to the test, which fails on it
        errors.put(f"binder {binder}: {exc!r}")


def test_concurrent_binders_keep_every_binding_of_an_exchange(tmp_path):
    """The exchange tables (fan-out: Celery's broadcasts) are rewritten by several processes at once.

    kombu's transport created a table with open("wb") (truncated, then locked): two binders that
    found no table both wrote one and a binding was lost, and a reader could read it empty.
    """
    folder = str(tmp_path)
    for sub in ("queue", "processed", "control"):
        os.makedirs(os.path.join(folder, sub))
    context = multiprocessing.get_context("spawn")
    barrier, errors = context.Barrier(BINDERS), context.Queue()
    binders = [context.Process(target=_bind, args=(folder, TRANSPORT, b, barrier, errors)) for b in range(BINDERS)]
    for p in binders:
        p.start()
    for p in binders:
        p.join(60)
    found_errors = []
    while not errors.empty():
        found_errors.append(errors.get())

    assert found_errors == []
    with Connection("filesystem://localhost/", transport=TRANSPORT, transport_options=_options(folder)) as conn:
        for e in range(EXCHANGES):
            table = conn.default_channel.get_table(f"fan-{e}")
            assert sorted(q.queue for q in table) == [f"q{b}" for b in range(BINDERS)], e
