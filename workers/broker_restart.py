"""A Redis restart must not end the worker.

On a lost broker connection Celery 5.7 first collects the connection (its transport forgets its client), then closes
it. If the first close of the channel did not finish (Redis was already gone), the second one reaches kombu's
restore of the unacknowledged messages, which asks the forgotten client for its host: `AttributeError: 'NoneType'
object has no attribute 'hostname'`, not a connection error, so the consumer dies with "Unrecoverable error" instead
of reconnecting (tests/security/test_faults.py saw it in about one full run of six; kombu 5.7.0, the latest).

Here that question is answered as what it is, a connection error, which the consumer's cleanup ignores before it
reconnects. The unacknowledged message is not lost: kombu restores it when its visibility timeout passes, and a job
whose dispatch is stale is dispatched again by the portal (`recover_stale_jobs`, portal/jobs/actions/dispatch.py), once.
"""

from __future__ import annotations

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

_connparams = kombu_redis.Channel._connparams


def _connparams_of_a_connection_still_held(self, asynchronous: bool = False) -> dict:  # noqa: ANN001 - kombu's
    if self.connection.client is None:
        raise RedisConnectionError("the broker connection was already released")
    return _connparams(self, asynchronous=asynchronous)


def install() -> None:
    kombu_redis.Channel._connparams = _connparams_of_a_connection_still_held
